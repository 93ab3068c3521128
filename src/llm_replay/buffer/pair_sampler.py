"""`Pairs`: whole preference pairs, drawn by weight, where every other table's rows are drawn.

A preference pair is two rows inserted together, the chosen one first (`preference.pairs`), so a
pair table is a `ReplayTable` with this sampler: it keeps the index of live pairs (both rows'
slots, in insertion order, and how wrong the policy was on each pair when last trained, σ(−β h),
set through `update_priorities`), and a batch of `n` rows is `n // 2` whole pairs, chosen without
replacement, each pair's rows side by side (chosen, rejected, ...). Weights:

- `uniform`: every stored pair alike;
- `recency`: 2^(−age / half_life), age in policy versions; relative weights depend only on each
  pair's own version (all ages grow together), so the current version is not needed;
- `margin`: σ(−β h)^exponent, the pairs the policy still ranks wrong likelier (a new pair starts
  at the highest weight, 1, until it has been trained once).

Both rows of a pair carry the same policy version (checked at insert), so age eviction takes
whole pairs. A row removed alone (by key) takes its pair out of the index; its partner stays
stored until removed. `leave_out` holds pairs back from the draws (a step's fresh pairs, which
it trains anyway), for the one owner of the table; the table's lock does not cover it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llm_replay.buffer.samplers import EMPTY, F64, I64, Sampler
from llm_replay.buffer.storage import RolloutStorage
from llm_replay.data.batch import RolloutBatch

WEIGHTINGS = ("uniform", "recency", "margin")
MIN_WRONGNESS = 1e-6
"""A margin weight's floor, so a pair the policy ranks right by far can still be drawn."""


class Pairs(Sampler):
    """Whole pairs (chosen, rejected) by `weighting`, without replacement within a batch."""

    name = "pairs"
    with_replacement = False

    def __init__(
        self, weighting: str = "uniform", half_life: float = 4.0, exponent: float = 1.0
    ) -> None:
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting = {weighting!r}: choose one of {', '.join(WEIGHTINGS)}")
        if not (math.isfinite(half_life) and half_life > 0):
            raise ValueError(f"half_life = {half_life!r}: must be finite and > 0")
        if not (math.isfinite(exponent) and exponent >= 0):
            raise ValueError(f"exponent = {exponent!r}: must be finite and >= 0")
        self.weighting = weighting
        self.half_life = float(half_life)
        self.exponent = float(exponent)

    def bind(self, storage: RolloutStorage) -> None:
        super().bind(storage)
        self.chosen = EMPTY.copy()
        self.rejected = EMPTY.copy()
        self.wrongness = np.zeros(0, dtype=np.float64)
        self.held = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.chosen)

    # ----------------------------------------------------------------- index upkeep
    def check_insert(self, batch: RolloutBatch) -> None:
        if len(batch) % 2:
            raise ValueError(f"pairs: {len(batch)} rows; a pair table takes whole pairs (2 rows)")
        unannotated = np.flatnonzero(batch.annotators == 0)
        if unannotated.size:
            raise ValueError(
                f"pairs: row {int(unannotated[0])} has no annotator; a pair table takes "
                "annotated pairs (chosen, rejected, ...; preference.pairs)"
            )
        split = np.flatnonzero(batch.policy_versions[0::2] != batch.policy_versions[1::2])
        if split.size:
            i = int(split[0])
            raise ValueError(
                f"pairs[{i}].policy_versions: {batch.policy_versions[2 * i]} and "
                f"{batch.policy_versions[2 * i + 1]}; a pair's rows share the version that "
                "generated them, so age eviction takes the pair whole"
            )

    def on_insert(self, slots: I64) -> None:
        n = len(slots) // 2
        self.chosen = np.concatenate([self.chosen, slots[0::2]])
        self.rejected = np.concatenate([self.rejected, slots[1::2]])
        self.wrongness = np.concatenate([self.wrongness, np.ones(n)])
        self.held = np.concatenate([self.held, np.zeros(n, dtype=bool)])

    def on_remove(self, slots: I64) -> None:
        gone = np.isin(self.chosen, slots) | np.isin(self.rejected, slots)
        if gone.any():
            self._keep(~gone)

    def _keep(self, keep: np.ndarray) -> None:
        self.chosen, self.rejected = self.chosen[keep], self.rejected[keep]
        self.wrongness, self.held = self.wrongness[keep], self.held[keep]

    def update_priorities(self, slots: I64, priorities: F64) -> None:
        """Set σ(−β h) of the pairs whose chosen row is at `slots` (other slots are ignored)."""
        values = np.asarray(priorities, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
        if bad.size:
            raise ValueError(f"priorities[{int(bad[0])}] = {values[bad[0]]}: must be finite, >= 0")
        position = {int(s): i for i, s in enumerate(self.chosen.tolist())}
        for slot, value in zip(slots.tolist(), values.tolist(), strict=True):
            index = position.get(int(slot))
            if index is not None:
                self.wrongness[index] = value

    def leave_out(self, chosen_slots: I64) -> None:
        """Hold the pairs whose chosen row is at `chosen_slots` back from the draws; the next
        call replaces the set (`EMPTY` releases them all)."""
        self.held = np.isin(self.chosen, chosen_slots)

    # ----------------------------------------------------------------- draws
    def versions(self) -> I64:
        """Each stored pair's policy version, in index order."""
        return self.storage.policy_version[self.chosen].astype(np.int64)

    def weights(self) -> F64:
        if self.weighting == "recency":  # in log space: old pairs must not all round to 0
            log_weight = np.log(2.0) * self.versions() / self.half_life
            weights: F64 = np.exp(log_weight - log_weight.max()) if len(self) else log_weight
            return weights
        if self.weighting == "margin":
            return np.maximum(self.wrongness, MIN_WRONGNESS) ** self.exponent
        return np.ones(len(self))

    def available(self) -> int:
        return 2 * int((~self.held).sum())

    def sample(self, n: int, rng: np.random.Generator) -> tuple[I64, F64]:
        candidates = np.flatnonzero(~self.held)
        size = min(n // 2, len(candidates))
        if size == 0:
            return EMPTY.copy(), np.zeros(0)
        weights = self.weights()[candidates]
        p = weights / weights.sum()
        picked = rng.choice(len(candidates), size=size, replace=False, p=p)
        pairs = candidates[picked]
        slots = np.stack([self.chosen[pairs], self.rejected[pairs]], 1).ravel()
        return slots.astype(np.int64), np.repeat(p[picked], 2)

    # ----------------------------------------------------------------- checkpoints
    def config(self) -> dict[str, Any]:
        return {"weighting": self.weighting, "half_life": self.half_life, "exponent": self.exponent}

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"chosen": self.chosen, "rejected": self.rejected, "wrongness": self.wrongness}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.bind(self.storage)
        try:
            chosen, rejected, wrongness = (arrays[k] for k in ("chosen", "rejected", "wrongness"))
        except KeyError as error:
            raise ValueError(f"sampler {error.args[0]}: missing from the pair index") from None
        if not len(chosen) == len(rejected) == len(wrongness):
            raise ValueError("sampler chosen, rejected, wrongness: the pair index's arrays differ")
        slots = np.concatenate([chosen, rejected]).astype(np.int64)
        live = self.storage.live_slots()
        if len(np.unique(slots)) != len(slots) or not np.isin(slots, live).all():
            raise ValueError("sampler chosen, rejected: must name stored rows, each once")
        self.chosen = chosen.astype(np.int64)
        self.rejected = rejected.astype(np.int64)
        self.wrongness = wrongness.astype(np.float64)
        self.held = np.zeros(len(self.chosen), dtype=bool)
