"""RLEP's verified-success pool: correct answers per prompt, replayed beside fresh rollouts.

Phase I of RLEP (arXiv 2507.07451) collects verified-correct answers; a prompt enters the pool
once one of its groups has at least `min_correct` correct answers. Phase II draws M of them for the
same prompt. The pool is an ordinary `ReplayTable` (so it has eviction, stats and checkpoints);
the table's own per-prompt index (`ReplayTable.keys_for_prompt`) finds a prompt's successes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer import ReplayTable, Uniform
from llm_replay.buffer.prompt_index import prompt_key
from llm_replay.data.batch import RolloutBatch

__all__ = ["SuccessPool", "prompt_key"]


class SuccessPool:
    """Verified successes indexed by prompt."""

    def __init__(
        self,
        max_rollouts: int,
        *,
        min_correct: int = 2,
        seed: int = 0,
        table: ReplayTable | None = None,
    ) -> None:
        if isinstance(min_correct, bool) or min_correct < 1:
            raise ValueError(f"min_correct = {min_correct!r}: must be >= 1")
        self.min_correct = int(min_correct)
        self.table = table or ReplayTable(
            max_rollouts, sampler=Uniform(), seed=seed, name="rlep_pool"
        )
        self._rng = np.random.default_rng(seed + 1)

    def __len__(self) -> int:
        return self.table.size

    @property
    def num_prompts(self) -> int:
        return self.table.num_prompts

    def add(self, rollouts: RolloutBatch) -> int:
        """Store the correct rollouts of every group with >= min_correct of them; returns how many."""
        batch = RolloutBatch.coerce(rollouts)
        keep: list[int] = []
        for group in np.unique(batch.group_ids).tolist():
            members = np.flatnonzero((batch.group_ids == group) & (batch.correct == 1))
            if len(members) >= self.min_correct:
                keep.extend(members.tolist())
        if not keep:
            return 0
        chosen = batch.select(np.asarray(keep))
        return len(self.table.insert(chosen))

    def draw(self, prompt_ids: npt.NDArray[np.int32], m: int) -> RolloutBatch | None:
        """Up to `m` stored successes for this prompt (without replacement), or None."""
        keys = self.table.keys_for_prompt(prompt_key(prompt_ids))
        if not len(keys) or m <= 0:
            return None
        picked = keys[self._rng.permutation(len(keys))[:m]]
        batch, _ = self.table.get_batch(picked)
        return batch if len(batch) else None

    def rng_state(self) -> dict[str, Any]:
        """The draw RNG's state (JSON-serialisable); the table checkpoint holds everything else."""
        return dict(self._rng.bit_generator.state)

    def set_rng_state(self, state: dict[str, Any]) -> None:
        self._rng.bit_generator.state = state

    def save(self, path: str | Path) -> Path:
        return self.table.save(path)

    @classmethod
    def load(cls, path: str | Path, *, min_correct: int = 2, seed: int = 0) -> SuccessPool:
        table = ReplayTable.load(path)
        return cls(table.max_rollouts, min_correct=min_correct, seed=seed, table=table)
