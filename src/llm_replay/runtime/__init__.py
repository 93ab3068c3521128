"""Runtimes: the synchronous loop (deterministic), with replay strategies and checkpoints."""

from llm_replay.runtime.strategies import build_strategy
from llm_replay.runtime.sync import SyncTrainer, build_task, train

__all__ = ["SyncTrainer", "build_strategy", "build_task", "train"]
