"""Saving the sampler with verl's checkpoints: `trainer.checkpoint_callback_class`.

verl's sync trainer saves the actor, the critic and the dataloader, but not its sampler (nor, in
sync mode, TransferQueue). This callback writes the sampler's whole state (tables, trajectories,
counters) into `global_step_N/llm_replay` after verl's own save; on resume the sampler reads it
back on its first training call, so the batches after a restart are the ones an uninterrupted
run would have composed from the same rollouts. verl prunes old checkpoints' weights
(`max_actor_ckpt_to_keep`) but not the folders around them: the callback removes the sampler's
state where the weights it belongs to are gone.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from llm_replay.integrations.verl.sampler import ReplaySampler
from llm_replay.integrations.verl.state import STATE_DIR


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
            prune_orphaned_states(Path(checkpoint_dir).parent, keep=Path(checkpoint_dir))


def prune_orphaned_states(root: Path, keep: Path) -> list[Path]:
    """Remove the sampler's state from every `global_step_N` under `root` whose actor weights
    verl has pruned (`trainer.max_actor_ckpt_to_keep`: verl deletes `global_step_N/actor` and
    leaves the folder), so the state goes with the weights it belongs to; a state is useless
    without them, since the table resumes with the weights it was trained with. Returns what
    was removed."""
    removed = []
    for folder in root.glob("global_step_*"):
        state = folder / STATE_DIR
        if folder != keep and state.is_dir() and not (folder / "actor").exists():
            shutil.rmtree(state)
            removed.append(state)
    return removed
