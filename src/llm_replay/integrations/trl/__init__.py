"""Replay inside TRL's `GRPOTrainer`: `ReplayGRPOTrainer` and `ReplayGRPOConfig`.

Switching an existing TRL script to replay is the import and two config fields::

    from llm_replay.integrations.trl import ReplayGRPOConfig as GRPOConfig
    from llm_replay.integrations.trl import ReplayGRPOTrainer as GRPOTrainer
    args = GRPOConfig(..., replay_method="positive", replay_knobs={"replay_ratio": 2})

Needs the `trl` extra (`pip install 'llm-replay[trl]'`).
"""

from __future__ import annotations

try:
    import trl  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "llm_replay.integrations.trl needs TRL: pip install 'llm-replay[trl]'"
    ) from error

from llm_replay.integrations.trl.config import ReplayGRPOConfig
from llm_replay.integrations.trl.trainer import ReplayGRPOTrainer

__all__ = ["ReplayGRPOConfig", "ReplayGRPOTrainer"]
