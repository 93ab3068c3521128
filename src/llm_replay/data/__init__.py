"""The data model every part shares: `Rollout`, `Group`, `RolloutBatch` (`rollout.py`) and the
validation of every field (`validation.py`). Imports nothing of llm_replay above it, so the
buffer can stand on it."""
