"""Saving the sampler with verl's checkpoints: `trainer.checkpoint_callback_class`.

verl's sync trainer saves the actor, the critic and the dataloader, but not its sampler (nor, in
sync mode, TransferQueue). This callback writes the sampler's whole state (tables, trajectories,
counters) into `global_step_N/llm_replay` after verl's own save; on resume the sampler reads it
back on its first training call, so the batches after a restart are the ones an uninterrupted
run would have composed from the same rollouts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from llm_replay.integrations.verl.sampler import STATE_DIR, ReplaySampler


class ReplayCheckpointCallback(CheckpointCallback):  # type: ignore[misc]
    """Set `trainer.checkpoint_callback_class=llm_replay.integrations.verl.ReplayCheckpointCallback`
    (subclass it and call `super().on_save` to add a callback of your own)."""

    def on_save(
        self,
        trainer: Any,
        global_step: int,
        checkpoint_dir: str,
        async_save: bool = False,
        **kwargs: Any,
    ) -> None:
        super().on_save(trainer, global_step, checkpoint_dir, async_save=async_save, **kwargs)
        sampler = getattr(trainer, "replay_buffer", None)
        if isinstance(sampler, ReplaySampler):
            sampler.save(Path(checkpoint_dir) / STATE_DIR)
