"""llm-replay: experience replay for RL post-training of language models."""

from llm_replay.data.rollout import Group, InvalidRolloutError, Rollout, RolloutBatch

__version__ = "0.1.0"
__all__ = ["Group", "InvalidRolloutError", "Rollout", "RolloutBatch", "__version__"]
