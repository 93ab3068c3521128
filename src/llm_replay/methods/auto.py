"""Auto replay: uniform replay whose ratio follows the compute-optimal rule of arXiv 2604.08706.

y* = μ / (ρ + 1/x): reuse grows with μ (generation cost / training cost per rollout) and shrinks
with the staleness cost ρ; x = N/R is the buffer's horizon in rounds. μ is the run's measured
value (or `replay.mu`, to plan for other hardware) and is re-read every round, so y follows μ as
it changes. y is clipped to [1, max_ratio]: below 1 the learner would skip fresh data, which no
compute saving justifies; at y = 1 it trains on exactly the fresh rollouts, on-policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_replay.buffer import RateLimiter, ReplayTable, Sample
from llm_replay.methods.base import MethodConfig, MethodConfigError, TableReplay, knob, positive
from llm_replay.methods.registry import register
from llm_replay.rollout import RolloutBatch


@dataclass
class AutoConfig(MethodConfig):
    mu: float | None = knob(None, "μ to plan for; null: the run's measured μ")
    rho: float = knob(1.0, "ρ: staleness cost per round of age")
    horizon: float = knob(8.0, "x = N/R: rounds of rollouts kept")
    max_ratio: float = knob(8.0, "the largest y chosen")
    max_age: int | None = knob(None, "evict rollouts older than this many learner steps")

    def check(self) -> None:
        if self.mu is not None:
            positive("mu", self.mu)
        positive("rho", self.rho, zero_ok=True)
        if self.horizon < 1:
            raise MethodConfigError(f"horizon = {self.horizon!r}: must be >= 1 (rounds kept)")
        if self.max_ratio < 1:
            raise MethodConfigError(f"max_ratio = {self.max_ratio!r}: must be >= 1")
        if self.max_age is not None:
            positive("max_age", self.max_age)

    @property
    def samples_per_insert(self) -> float:
        return self.max_ratio


@register
class AutoReplay(TableReplay):
    name = "auto"
    description = "Uniform replay with y = clip(μ / (ρ + 1/x), 1, max_ratio), re-chosen each round."
    paper = "Compute-optimal replay for LLM RL (the y* rule), arXiv 2604.08706"
    Config = AutoConfig

    def __init__(self, settings: MethodConfig, context: Any) -> None:
        super().__init__(settings, context)
        self.ratio = 1.0

    def build_table(self, rate_limiter: RateLimiter | None = None) -> ReplayTable:
        s = self.settings
        assert isinstance(s, AutoConfig)
        capacity = max(self.context.batch_size, round(s.horizon * self.context.rollouts_per_step))
        return ReplayTable.uniform(
            capacity, max_age=s.max_age, rate_limiter=rate_limiter, seed=self.context.seed
        )

    def choose_ratio(self, mu: float | None) -> float:
        s = self.settings
        assert isinstance(s, AutoConfig)
        if mu is None:
            return 1.0
        return float(min(s.max_ratio, max(1.0, mu / (s.rho + 1.0 / s.horizon))))

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        s = self.settings
        assert isinstance(s, AutoConfig)
        self.ratio = self.choose_ratio(s.mu if s.mu is not None else self.mu_source())
        if self.ratio > 1.0:
            yield from self.draw(fresh, self.ratio)
            return
        # y = 1: no reuse pays, so train on exactly the fresh rollouts (kept in the buffer all
        # the same, so reuse can start at once when μ rises)
        keys = self.table.insert(fresh)
        version = self.table.policy_version
        batch_size = self.context.batch_size
        for start in range(0, len(fresh), batch_size):
            rows = np.arange(start, min(start + batch_size, len(fresh)))
            yield Sample.from_batch(fresh.select(rows), current_version=version, keys=keys[rows])

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "replay/auto_ratio": self.ratio}

    def state(self) -> dict[str, Any]:
        return {**super().state(), "replay_ratio": self.ratio}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.ratio = float(state.get("replay_ratio", 1.0))
