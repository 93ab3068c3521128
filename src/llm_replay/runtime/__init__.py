"""Runtimes: the synchronous loop (deterministic), threaded workers on one machine, Ray actors on a
cluster — all driven by the same run loop, replay methods and checkpoints.

The trainers are imported when first used, so that the torch-free parts (`runtime.layout`,
`runtime.schedule`) can be read by the experiment tools without loading torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_replay.config import Config
    from llm_replay.runtime.loop import RunLoop
    from llm_replay.runtime.sync import SyncTrainer, train


def build_trainer(config: Config, *, run_dir: Path | None = None) -> RunLoop:
    """The trainer `config.runtime` names (`config.runtimes`): sync (or the preference loop),
    threaded, or ray (needs `llm-replay[ray]`)."""
    from llm_replay.config.runtimes import RUNTIMES

    module, name = RUNTIMES[config.runtime].trainer(config).split(":")
    trainer: Callable[..., RunLoop] = getattr(importlib.import_module(module), name)
    return trainer(config, run_dir=run_dir)


def __getattr__(name: str) -> Any:
    if name == "RunLoop":
        from llm_replay.runtime.loop import RunLoop

        return RunLoop
    if name in ("SyncTrainer", "train"):
        from llm_replay.runtime import sync

        return getattr(sync, name)
    raise AttributeError(f"module 'llm_replay.runtime' has no attribute {name!r}")


__all__ = ["RunLoop", "SyncTrainer", "build_trainer", "train"]
