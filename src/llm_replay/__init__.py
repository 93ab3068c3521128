"""llm-replay: experience replay for RL post-training of language models."""

from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import Group, InvalidRolloutError, Rollout

__version__ = "0.2.0"  # the release; CHANGELOG.md says what changed
__all__ = ["Group", "InvalidRolloutError", "Rollout", "RolloutBatch", "__version__"]
