"""Runtimes: the synchronous loop (deterministic), threaded workers on one machine, Ray actors on a
cluster — all driven by the same run loop, replay methods and checkpoints."""

from __future__ import annotations

from pathlib import Path

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
    return SyncTrainer(config, run_dir=run_dir)


__all__ = ["RunLoop", "SyncTrainer", "build_trainer", "train"]
