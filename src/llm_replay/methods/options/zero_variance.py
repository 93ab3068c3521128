"""Zero-variance group replacement: fill the places of uninformative fresh groups with stored
groups that carry a learning signal, instead of generating more (dynamic sampling).

Under group baselines a group whose rollouts all got the same reward has A = 0 for every rollout:
it costs a generation and gives no gradient. DAPO's dynamic sampling regenerates until the batch
holds only informative groups, paying for every extra round. This option keeps the most recent
informative groups (|A| > 0 somewhere in the group) in a small FIFO store and, in each round,
replaces every zero-variance group with one stored group, whole, so its advantages keep the
baseline they were computed with. A stored group fills at most once and is dropped after
`max_age` learner steps; when the store runs dry the remaining zero-variance groups stay in the
batch as they are. The fillers keep their behaviour log-probs and policy versions, so the loss's
importance correction applies to them like to any replayed rollout.

It applies to the methods whose batches are built from the fresh groups (on_policy, prioritized,
rlep); a method that draws its batches from a table of single rollouts (uniform, positive, auto)
has no fresh-group places to fill. With prioritized replay a filler joins the replay table as a
new row, as every rollout of the round does. Metrics: `zero_variance/groups` in the round,
`/slots_filled`, `/filler_age_mean` and `/filler_age_max` (learner steps), `/store_size`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.buffer import Groups, ReplayTable
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    TABLE_DIR,
    MethodContext,
    MethodOption,
    OptionConfig,
    ReplayMethod,
    knob,
    positive,
)
from llm_replay.methods.registry import register_option


@dataclass
class ZeroVarianceConfig(OptionConfig):
    capacity: int = knob(1024, "rollouts of informative groups kept as fillers (FIFO)")
    max_age: int | None = knob(32, "fillers older than this many learner steps are dropped")

    def check(self) -> None:
        positive("capacity", self.capacity)
        if self.max_age is not None:
            positive("max_age", self.max_age)


@register_option
class ZeroVarianceReplacement(MethodOption[ZeroVarianceConfig]):
    name = "zero_variance"
    description = (
        "Fill each zero-variance fresh group's places with a stored informative group "
        "instead of dynamic sampling."
    )
    paper = "requested in TRL #3973, #4764 and ms-swift #8429; cf. DAPO, arXiv 2503.14476"
    stores_rows = True
    Config = ZeroVarianceConfig

    def __init__(self, settings: OptionConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        self.store = ReplayTable(
            self.settings.capacity,
            sampler=Groups(),
            max_age=self.settings.max_age,
            seed=context.seed + 17,
            name="zero_variance_fillers",
        )
        self.last: dict[str, float] = {}

    @classmethod
    def refusal(cls, method: type[ReplayMethod[Any]]) -> str | None:
        if not method.trains_fresh_groups:
            return (
                "its batches are drawn from a table of single rollouts, not built from fresh groups"
            )
        return None

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        fresh = RolloutBatch.coerce(fresh)
        groups, inverse = np.unique(fresh.group_ids, return_inverse=True)
        spread = np.zeros(len(groups))
        np.maximum.at(spread, inverse, fresh.rewards)
        low = np.full(len(groups), np.inf)
        np.minimum.at(low, inverse, fresh.rewards)
        flat = spread - low == 0
        flat_rows = flat[inverse]
        zero_groups = int(flat.sum())
        filled, ages = self._fill(int(flat_rows.sum()))
        informative = fresh.select(np.flatnonzero(~flat_rows))
        if len(informative):
            self.store.insert(informative)
        self.last = {
            "zero_variance/groups": float(zero_groups),
            "zero_variance/slots_filled": float(0 if filled is None else len(filled)),
            "zero_variance/filler_age_mean": float(ages.mean()) if len(ages) else 0.0,
            "zero_variance/filler_age_max": float(ages.max()) if len(ages) else 0.0,
            "zero_variance/store_size": float(self.store.size),
        }
        if filled is None:
            return fresh
        kept = fresh.select(np.flatnonzero(flat_rows)[len(filled) :])
        parts = [p for p in (informative, filled, kept) if len(p)]
        return RolloutBatch.concat(parts)

    def _fill(self, slots: int) -> tuple[RolloutBatch | None, np.ndarray]:
        """Whole stored groups for up to `slots` places, each used once."""
        take = min(slots, self.store.size)
        if take == 0:
            return None, np.zeros(0)
        sample = self.store.sample(take, timeout=0)
        self.store.remove(sample.keys)
        return sample.to_batch(), np.asarray(sample.ages, dtype=np.float64)

    def set_policy_version(self, version: int) -> None:
        self.store.set_policy_version(version)

    def metrics(self) -> dict[str, float]:
        return dict(self.last)

    def stored_tables(self) -> list[ReplayTable]:
        return [self.store]

    def state(self) -> dict[str, Any]:
        return {"last": self.last}

    def load_state(self, state: dict[str, Any]) -> None:
        self.last = {k: float(v) for k, v in state["last"].items()}

    def save(self, directory: Path) -> None:
        self.store.save(directory / TABLE_DIR)
        super().save(directory)

    def load(self, directory: Path) -> None:
        self.store = ReplayTable.load(directory / TABLE_DIR)
        super().load(directory)
