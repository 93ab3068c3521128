"""Tasks: problems with reference answers, a train/eval split, and safely scored rewards."""

from llm_replay.tasks.base import TASK_TAG, Problem, Task, TaskError, disjoint_train, task_tag
from llm_replay.tasks.dataset import DatasetTask, math_verify_reward, read_rows
from llm_replay.tasks.mixture import MixtureTask
from llm_replay.tasks.reasoning_gym import ReasoningGymTask
from llm_replay.tasks.rewards import RewardCounts, SafeScorer

__all__ = [
    "TASK_TAG",
    "DatasetTask",
    "MixtureTask",
    "Problem",
    "ReasoningGymTask",
    "RewardCounts",
    "SafeScorer",
    "Task",
    "TaskError",
    "disjoint_train",
    "math_verify_reward",
    "read_rows",
    "task_tag",
]
