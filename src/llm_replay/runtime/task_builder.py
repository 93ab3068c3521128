"""The task named by a run's `task:` config section, and the scorers of its rewards.

Here, above the config and the tasks, because it reads the one to build the other: the tasks
package stays below the config (a task knows nothing of `Config`)."""

from __future__ import annotations

import logging

from llm_replay.config import Config
from llm_replay.tasks.base import Task
from llm_replay.tasks.dataset import DatasetTask
from llm_replay.tasks.mixture import MixtureTask
from llm_replay.tasks.reasoning_gym import ReasoningGymTask
from llm_replay.tasks.reward_model import ModelScorer, RewardModel
from llm_replay.tasks.rewards import SafeScorer

log = logging.getLogger(__name__)


def build_task(config: Config, *, quiet: bool = False) -> Task:
    """The configured task; a split that came out short or mostly repeats is logged as a warning
    (unless `quiet`: a caller that only reads the problems, not the run that trains on them)."""
    task = _make_task(config)
    for report in () if quiet else getattr(task, "split_reports", ()):
        message = report.warning()
        if message:
            log.warning("task %s: %s", task.name, message)
    return task


def _make_task(config: Config) -> Task:
    t = config.task
    if t.kind == "mixture":
        return MixtureTask(
            t.mixture_members,
            train_size=t.train_size,
            eval_size=t.eval_size,
            seed=t.seed,
            eval_seed=t.eval_seed,
            eval_fraction=t.eval_fraction,
            correct_threshold=t.correct_threshold,
        )
    if t.kind == "dataset":
        assert t.path is not None
        return DatasetTask(
            t.path,
            eval_path=t.eval_path,
            eval_fraction=t.eval_fraction,
            seed=t.seed,
            prompt_field=t.prompt_field,
            answer_field=t.answer_field,
            correct_threshold=t.correct_threshold,
        )
    return ReasoningGymTask(
        t.dataset,
        params=t.params,
        train_size=t.train_size,
        eval_size=t.eval_size,
        seed=t.seed,
        eval_seed=t.eval_seed,
        eval_fraction=t.eval_fraction,
        prompt_template=t.prompt_template,
        strip_spaces=t.strip_spaces,
        correct_threshold=t.correct_threshold,
    )


def build_scorer(config: Config, task: Task) -> SafeScorer | ModelScorer:
    """The training reward with the run's limits and failure reward (one per thread or process):
    the task's verifier, or with `task.reward = model` the reward model."""
    if config.task.reward == "model":
        r = config.reward_model
        assert r.path is not None
        model = RewardModel(
            r.path,
            output=r.output,
            device=r.device or config.model.device,
            batch_size=r.batch_size,
            max_length=r.max_length,
        )
        return ModelScorer(
            model, task, timeout_s=r.timeout_s, failure_reward=config.task.failure_reward
        )
    return build_verifier(config, task)


def build_verifier(config: Config, task: Task) -> SafeScorer:
    """The task's own scorer: the training reward unless a reward model is, and always the
    evaluation metric."""
    return SafeScorer(
        task,
        timeout_s=config.task.reward_timeout_s,
        failure_reward=config.task.failure_reward,
        binary=config.task.reward == "binary",
    )
