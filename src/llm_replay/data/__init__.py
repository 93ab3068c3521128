"""The data model every part shares: `Rollout` and `Group` (`rollout.py`), the columnar
`RolloutBatch` (`batch.py`) and the validation of every field (`validation.py`). Imports nothing of
llm_replay above it, so the buffer can stand on it."""
