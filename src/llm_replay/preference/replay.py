"""The pair table: annotated pairs kept in a `ReplayTable` and drawn again across epochs.

Each pair is two rows of the table (chosen, then rejected; `preference.pairs`), drawn by the
table's own `Pairs` sampler (`buffer.pair_sampler`: uniform, recency or margin weights, whole
pairs), so the table's machinery carries them: checkpoints (the pair index is the sampler's
state), the durable log, `llm-replay inspect`, `max_age` eviction by policy version and every
column. `PairReplay` is what a preference loop asks of it: whole pairs in with the oldest leaving
first at `capacity`, a step's fresh pairs left out of its replayed draws, σ(−β h) recorded after
each step, and the stale-judge eviction.

The stored pairs' mean σ(−β h) also says when they stop teaching: `annotate: when_stale` asks for
new annotations only when it falls below `stale_threshold`. A resumed run draws what an
uninterrupted one does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.buffer import ReplayTable, Sample
from llm_replay.buffer.pair_sampler import Pairs
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import ANNOTATORS

STATE_FILE = "pair_replay.json"
TABLE_DIR = "pair_table"
MODES = ("none", "uniform", "recency", "margin")


class PairReplay:
    def __init__(
        self,
        *,
        mode: str,
        capacity: int,
        max_age: int | None,
        recency_half_life: float,
        priority_exponent: float,
        seed: int,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"preference.replay = {mode!r}: choose {', '.join(MODES)}")
        self.mode = mode
        self.capacity = int(capacity)
        weighting = mode if self.replays else "uniform"
        sampler = Pairs(weighting, half_life=recency_half_life, exponent=priority_exponent)
        self.table = ReplayTable(
            2 * self.capacity, max_age=max_age, seed=seed, name="pairs", sampler=sampler
        )
        self.evicted = 0

    @classmethod
    def from_settings(cls, settings: Any, seed: int) -> PairReplay:
        """The table `preference.*` describes (`PreferenceConfig`: replay, capacity, max_age,
        recency_half_life, priority_exponent)."""
        return cls(
            mode=settings.replay,
            capacity=settings.capacity,
            max_age=settings.max_age,
            recency_half_life=settings.recency_half_life,
            priority_exponent=settings.priority_exponent,
            seed=seed,
        )

    @property
    def replays(self) -> bool:
        """Whether stored pairs are drawn again (any mode but "none"), so a round's fresh pairs
        are worth storing."""
        return self.mode != "none"

    @property
    def sampler(self) -> Pairs:
        sampler = self.table.sampler
        assert isinstance(sampler, Pairs)
        return sampler

    def __len__(self) -> int:
        return len(self.sampler)

    @property
    def chosen(self) -> np.ndarray:
        """The stored pairs' chosen rows' keys, oldest pair first."""
        return self.table.storage.keys_of(self.sampler.chosen)

    @property
    def rejected(self) -> np.ndarray:
        """The stored pairs' rejected rows' keys, in the order of `chosen`."""
        return self.table.storage.keys_of(self.sampler.rejected)

    @property
    def versions(self) -> np.ndarray:
        return self.sampler.versions()

    @property
    def wrongness(self) -> np.ndarray:
        return self.sampler.wrongness

    # ------------------------------------------------------------------ writes
    def insert(self, pairs: RolloutBatch) -> np.ndarray:
        """Store `pairs` (rows chosen, rejected, ...); the oldest pairs leave first when the
        table is full. Returns the rows' keys (chosen, rejected, ...)."""
        n = len(pairs) // 2
        if len(pairs) % 2 or n == 0:
            raise ValueError(f"pairs: {len(pairs)} rows; a pair table takes whole pairs (2 rows)")
        if n > self.capacity:
            raise ValueError(f"pairs: {n} pairs exceed preference.capacity = {self.capacity}")
        overflow = len(self) + n - self.capacity
        if overflow > 0:
            self._drop(np.arange(overflow))
        keys: np.ndarray = self.table.insert(pairs)
        return keys

    def set_version(self, version: int) -> None:
        """The policy's version: ages the pairs, and `max_age` evicts the old ones."""
        before = len(self)
        self.table.set_policy_version(version)
        self.evicted += before - len(self)

    def remove_scored_before(self, version: int, annotator: str = "reward_model") -> int:
        """Drop the pairs `annotator` judged at a version older than `version` (a file's pairs
        and a verifier's never go stale); returns how many."""
        older = self.table.keys_scored_before(version)
        judged = self.table.get_batch(older)[0].annotators == ANNOTATORS.index(annotator)
        stale = np.isin(self.chosen, older[judged])
        self._drop(np.flatnonzero(stale))
        return int(stale.sum())

    def update(self, chosen_keys: np.ndarray, wrongness: np.ndarray) -> None:
        """Record σ(−β h) of the pairs just trained (keys of their chosen rows)."""
        self.table.update_priorities(chosen_keys, wrongness)

    def _drop(self, indices: np.ndarray) -> None:
        if not len(indices):
            return
        sampler = self.sampler
        slots = np.concatenate([sampler.chosen[indices], sampler.rejected[indices]])
        self.table.remove(self.table.storage.keys_of(slots))
        self.evicted += len(indices)

    # ------------------------------------------------------------------ reads
    def draw(self, n: int, *, exclude: np.ndarray | None = None) -> Sample | None:
        """Up to `n` stored pairs (rows chosen, rejected, ...) by the mode's weights, leaving
        out the pairs whose chosen rows' keys are in `exclude`, and counted as sampled; None
        when there are none to draw."""
        if self.mode == "none" or n <= 0 or not len(self):
            return None
        held = np.zeros(0, dtype=np.int64)
        if exclude is not None and len(exclude):
            slots, found = self.table.storage.slots_of(exclude)
            held = slots[found]
        self.sampler.leave_out(held)
        try:
            size = min(n, self.sampler.available() // 2)
            return self.table.sample(2 * size) if size else None
        finally:
            self.sampler.leave_out(np.zeros(0, dtype=np.int64))

    def stale_signal(self) -> float:
        """Mean σ(−β h) of the stored pairs (NaN when empty): below `stale_threshold`, they have
        stopped teaching."""
        return float(self.wrongness.mean()) if len(self) else float("nan")

    def metrics(self, version: int) -> dict[str, float]:
        out = {"preference/stored_pairs": float(len(self)), "preference/evicted": self.evicted}
        if len(self):
            out["preference/stored_wrongness"] = self.stale_signal()
            out["preference/stored_age"] = float(np.mean(version - self.versions))
        return out

    # ------------------------------------------------------------------ state
    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.table.save(directory / TABLE_DIR)
        state = {"evicted": self.evicted, "mode": self.mode}
        (directory / STATE_FILE).write_text(json.dumps(state))

    def load(self, directory: Path) -> None:
        table = ReplayTable.load(directory / TABLE_DIR)
        if not isinstance(table.sampler, Pairs):
            raise ValueError(
                f"{directory / TABLE_DIR}: its sampler is {table.sampler.name!r}, not a pair "
                "index (a pair table saved by an older llm-replay cannot be resumed)"
            )
        self.table = table
        state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
        self.evicted = int(state["evicted"])
