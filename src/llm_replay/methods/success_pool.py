"""RLEP's verified-success pool: correct answers per prompt, replayed beside fresh rollouts.

Phase I of RLEP (arXiv 2507.07451) collects verified-correct answers; a prompt enters the pool
once one of its groups has at least `min_correct` correct answers. Phase II draws M of them for the
same prompt. The pool is an ordinary `ReplayTable` (so it has eviction, stats and checkpoints)
plus an index from a prompt's token ids to the keys of its stored successes; the index is
rebuilt from the table on load, and keys of evicted rollouts are dropped when next touched.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer import ReplayTable, Uniform
from llm_replay.data.rollout import RolloutBatch


def prompt_key(prompt_ids: npt.NDArray[np.int32]) -> bytes:
    """A 16-byte digest of a prompt's token ids (the identity of a question)."""
    return hashlib.blake2b(
        np.ascontiguousarray(prompt_ids, dtype=np.int32).tobytes(), digest_size=16
    ).digest()


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
        self._index: dict[bytes, list[int]] = {}
        if table is not None:
            self._reindex()

    def __len__(self) -> int:
        return self.table.size

    @property
    def num_prompts(self) -> int:
        return len(self._index)

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
        keys = self.table.insert(chosen)
        offsets = np.concatenate(([0], np.cumsum(chosen.prompt_lengths)))
        for i, key in enumerate(keys.tolist()):
            prompt = chosen.prompt_ids[offsets[i] : offsets[i + 1]]
            self._index.setdefault(prompt_key(prompt), []).append(key)
        return len(keys)

    def draw(self, prompt_ids: npt.NDArray[np.int32], m: int) -> RolloutBatch | None:
        """Up to `m` stored successes for this prompt (without replacement), or None."""
        key = prompt_key(prompt_ids)
        keys = self._index.get(key)
        if not keys or m <= 0:
            return None
        picked = np.asarray(keys)[self._rng.permutation(len(keys))[:m]]
        sample, found = self.table.get(picked)
        if not found.all():  # some were evicted: forget them
            dead = set(picked[~found].tolist())
            self._index[key] = [k for k in keys if k not in dead]
            if not self._index[key]:
                del self._index[key]
        if len(sample) == 0:
            return None
        return sample.to_batch()

    def _reindex(self) -> None:
        self._index.clear()
        live = self.table.storage.live_in_order()
        keys = self.table.storage.keys_of(live)
        if not len(keys):
            return
        sample, _ = self.table.get(keys)
        batch = sample.to_batch()
        offsets = np.concatenate(([0], np.cumsum(batch.prompt_lengths)))
        for i, k in enumerate(keys.tolist()):
            prompt = batch.prompt_ids[offsets[i] : offsets[i + 1]]
            self._index.setdefault(prompt_key(prompt), []).append(k)

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
