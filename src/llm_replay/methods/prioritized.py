"""Rollout-level advantage-prioritized replay with fresh-anchored batches.

Single rollouts are stored with P ∝ (|A| + ε)^α frozen at birth and evicted after `max_age`
learner steps; each round trains one batch of every fresh rollout plus round(fresh_ratio · R)
replayed ones, drawn before the fresh round joins the table (so a batch never holds the same
rollout twice; early on, when the table holds fewer, all of it is used).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from llm_replay.buffer import ReplayTable, Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfigError,
    MethodContext,
    ReplayMethod,
    TableKnobs,
    knob,
    positive,
)
from llm_replay.methods.compose import round_half_up, with_source
from llm_replay.methods.registry import register
from llm_replay.methods.table_spec import TableSpec


class FreshAnchored:
    """Every fresh rollout, plus round(ratio · n_fresh) replayed from `replay`, then store fresh."""

    def __init__(self, replay: ReplayTable, ratio: float = 0.5) -> None:
        if not (math.isfinite(ratio) and ratio >= 0):
            raise ValueError(f"ratio = {ratio!r}: must be finite and >= 0")
        self.replay = replay
        self.ratio = float(ratio)

    def compose(self, fresh: RolloutBatch, *, timeout: float | None = None) -> Sample:
        fresh = RolloutBatch.coerce(fresh)
        take = min(round_half_up(self.ratio * len(fresh)), self.replay.size)
        if not self.replay.sampler.with_replacement:
            take = min(take, self.replay.sampler.available())
        replayed = self.replay.sample(take, timeout=timeout) if take else None
        keys = self.replay.insert(fresh, timeout=timeout)
        parts = [Sample.from_batch(fresh, current_version=self.replay.policy_version, keys=keys)]
        if replayed is not None:
            parts.append(with_source(replayed, 1))
        return Sample.concat(parts)


@dataclass
class PrioritizedConfig(TableKnobs):
    capacity: int = knob(4096, "rollouts kept (N); the oldest leave first")
    max_age: int | None = knob(10, "τ_max: evict rollouts older than this many learner steps")
    alpha: float = knob(0.5, "α: P ∝ (|A| + ε)^α")
    beta: float = knob(0.4, "β: importance-weight exponent (algorithm.use_sampling_weights)")
    fresh_ratio: float = knob(0.5, "replayed rollouts per fresh rollout in each batch")

    def check(self) -> None:
        super().check()
        positive("alpha", self.alpha, zero_ok=True)
        positive("beta", self.beta, zero_ok=True)
        positive("fresh_ratio", self.fresh_ratio, zero_ok=True)
        if self.fresh_ratio > 64:
            raise MethodConfigError(f"fresh_ratio = {self.fresh_ratio!r}: must be <= 64")

    @property
    def samples_per_insert(self) -> float:
        return 1.0 + self.fresh_ratio


PrioritizedT = TypeVar("PrioritizedT", bound="PrioritizedConfig")


@register
class PrioritizedReplay(ReplayMethod[PrioritizedT]):
    name = "prioritized"
    description = "|A|-prioritized single rollouts, age eviction, fresh-anchored batches."
    paper = "Rollout-level advantage-prioritized replay, arXiv 2606.04560"
    Config = PrioritizedConfig
    trains_fresh_groups = True

    @classmethod
    def table_spec(cls, settings: PrioritizedConfig, context: MethodContext) -> TableSpec:
        s = settings
        arguments = {"alpha": s.alpha, "beta": s.beta, "max_age": s.max_age, "seed": context.seed}
        return TableSpec("prioritized", s.capacity, arguments)

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        s = self.settings
        yield FreshAnchored(self.table, s.fresh_ratio).compose(fresh)
