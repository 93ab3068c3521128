"""Runtimes: the synchronous loop (deterministic), threaded workers on one machine, Ray actors on a
cluster — all driven by the same run loop, replay methods and checkpoints.

The trainers are imported when first used, so that the torch-free parts (`runtime.layout`,
`runtime.schedule`) can be read by the experiment tools without loading torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_replay.config import Config
    from llm_replay.runtime.loop import RunLoop
    from llm_replay.runtime.sync import SyncTrainer, train


def build_trainer(config: Config, *, run_dir: Path | None = None) -> RunLoop:
    """The trainer for `config.runtime`: sync, threaded, or ray (needs `llm-replay[ray]`)."""
    if config.runtime == "threaded":
        from llm_replay.runtime.threaded import ThreadedTrainer

        return ThreadedTrainer(config, run_dir=run_dir)
    if config.runtime == "ray":
        from llm_replay.runtime.ray import RayTrainer

        return RayTrainer(config, run_dir=run_dir)
    if config.preference.enabled:
        from llm_replay.runtime.preference import PreferenceTrainer

        return PreferenceTrainer(config, run_dir=run_dir)
    from llm_replay.runtime.sync import SyncTrainer

    return SyncTrainer(config, run_dir=run_dir)


def __getattr__(name: str) -> Any:
    if name == "RunLoop":
        from llm_replay.runtime.loop import RunLoop

        return RunLoop
    if name in ("SyncTrainer", "train"):
        from llm_replay.runtime import sync

        return getattr(sync, name)
    raise AttributeError(f"module 'llm_replay.runtime' has no attribute {name!r}")


__all__ = ["RunLoop", "SyncTrainer", "build_trainer", "train"]
