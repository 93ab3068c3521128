"""Compute-optimal replay: uniform replay whose ratio follows the rule of arXiv 2604.08706.

This method was called `auto` until issue #28 gave that name to the recommended recipe
(`methods/recipes.py`); its log keys keep the old prefix (`replay/auto_ratio`, `replay/auto_rho`)
so that archived runs and new ones read alike.

y* = μ / (ρ + 1/x): reuse grows with μ (generation cost / training cost per rollout) and shrinks
with the staleness cost ρ; x = N/R is the buffer's horizon in rounds. μ is the run's measured
value (from the run's signals, or `replay.mu` to plan for other hardware) and is re-read every round, so y follows μ as
it changes. y is clipped to [1, max_ratio]: below 1 the learner would skip fresh data, which no
compute saving justifies; at y = 1 it trains on exactly the fresh rollouts, on-policy.

ρ is measured from the run (`rho_online`, the default); the `rho` knob is then only the prior used
until there is a measurement. `StalenessMeter` reads, after every learner step, the mean behaviour
KL per token of the trained batch and the batch's mean age in learner steps, and fits the slope
k = d KL / d age through the origin (exponentially weighted, so it follows the run). A rollout of
L tokens and age a then has a log importance weight of variance ≈ 2·L·k·a, and its effective
sample size falls as exp(−2·L·k·a) (the same ESS argument as FreshPER's decay): ρ_step = 2·L·k is
the share of a rollout's worth lost per learner step of age. A round takes y·R/B steps, so
ρ = ρ_step · y·R/B per round of age, and the rule becomes ρ_step·(R/B)·y² + y/x − μ = 0, solved
for its positive root. While y = 1 no trained rollout is stale, nothing is measured, and the prior
stands. The KL, age and length come from the run's signals (`methods.signals`); TRL reports no
behaviour KL, so under TRL too the prior stands.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfig,
    MethodConfigError,
    MethodContext,
    TableReplay,
    knob,
    positive,
)
from llm_replay.methods.registry import register
from llm_replay.methods.table_spec import TableSpec


@dataclass
class ComputeOptimalConfig(MethodConfig):
    mu: float | None = knob(None, "μ to plan for; null: the run's measured μ")
    rho: float = knob(1.0, "ρ: staleness cost per round of age (the prior, with rho_online)")
    rho_online: bool = knob(True, "measure ρ from the behaviour KL of trained batches")
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


class StalenessMeter:
    """ρ per learner step of age from (mean age, behaviour KL per token, tokens per rollout) of
    each trained batch: ρ_step = 2·L·k with k the KL-vs-age slope (see the module docstring)."""

    def __init__(self, decay: float = 0.95, min_steps: int = 5) -> None:
        self.decay = decay
        self.min_steps = min_steps
        self.sums = [0.0, 0.0, 0.0, 0.0]  # Σ age·kl, Σ age², Σ length, Σ weight
        self.steps = 0

    def observe(self, age: float, kl: float, length: float) -> None:
        if not (age > 0 and math.isfinite(kl) and math.isfinite(length)):
            return
        d = self.decay
        for i, value in enumerate((age * kl, age * age, length, 1.0)):
            self.sums[i] = d * self.sums[i] + value
        self.steps += 1

    @property
    def rho_per_step(self) -> float | None:
        if self.steps < self.min_steps:
            return None
        slope = max(0.0, self.sums[0] / self.sums[1])
        return 2.0 * (self.sums[2] / self.sums[3]) * slope

    def state(self) -> dict[str, Any]:
        return {"sums": list(self.sums), "steps": self.steps}

    def load_state(self, state: dict[str, Any]) -> None:
        self.sums = [float(v) for v in state["sums"]]
        self.steps = int(state["steps"])


def optimal_ratio(mu: float, rho_per_step: float, fresh_per_batch: float, horizon: float) -> float:
    """The positive root of ρ_step·(R/B)·y² + y/x − μ = 0 (`fresh_per_batch` = R/B, so a round is y·R/B steps)."""
    a = rho_per_step * fresh_per_batch
    if a <= 0:
        return mu * horizon
    return (-1.0 / horizon + math.sqrt(1.0 / horizon**2 + 4.0 * a * mu)) / (2.0 * a)


@register
class ComputeOptimalReplay(TableReplay[ComputeOptimalConfig]):
    name = "compute_optimal"
    description = "Uniform replay with y = clip(μ / (ρ + 1/x), 1, max_ratio), re-chosen each round."
    paper = "Compute-optimal replay for LLM RL (the y* rule), arXiv 2604.08706"
    Config = ComputeOptimalConfig
    async_batches = "rounds"  # composes its own batches each round
    ratio_floor = 1.0  # `choose_ratio` picks y in [1, max_ratio] each round

    def __init__(self, settings: MethodConfig, context: Any) -> None:
        super().__init__(settings, context)
        self.ratio = 1.0
        self.staleness = StalenessMeter()
        self.rho = float(self.settings.rho)

    @classmethod
    def table_spec(cls, settings: ComputeOptimalConfig, context: MethodContext) -> TableSpec:
        s = settings
        capacity = max(context.batch_size, round(s.horizon * context.rollouts_per_step))
        return TableSpec("uniform", capacity, {"max_age": s.max_age, "seed": context.seed})

    def choose_ratio(self, mu: float | None) -> float:
        s = self.settings
        if mu is None:
            return 1.0
        per_step = self.staleness.rho_per_step if s.rho_online else None
        if per_step is None:
            self.rho = s.rho
            return float(min(s.max_ratio, max(1.0, mu / (s.rho + 1.0 / s.horizon))))
        fresh_per_batch = self.context.rollouts_per_step / self.step_rows
        y = optimal_ratio(mu, per_step, fresh_per_batch, s.horizon)
        y = float(min(s.max_ratio, max(1.0, y)))
        self.rho = per_step * y * fresh_per_batch  # per round of age at the y chosen
        return y

    @classmethod
    def reads_measured_mu(cls, settings: Any) -> bool:
        return bool(settings.mu is None)

    def observe_step(self, sample: Sample, metrics: Mapping[str, float]) -> None:
        step = self.context.signals.step  # this step's statistics, recorded just before
        if "kl_behaviour" in step and "age_mean" in step:
            self.staleness.observe(
                step["age_mean"], step["kl_behaviour"], step["completion_length"]
            )

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        s = self.settings
        self.ratio = self.choose_ratio(s.mu if s.mu is not None else self.context.signals.mu)
        if self.ratio > 1.0:
            yield from self.draw(fresh, 1.0 + self.replay_scale * (self.ratio - 1.0))
            return
        # y = 1: no reuse pays, so train on exactly the fresh rollouts (kept in the buffer all
        # the same, so reuse can start at once when μ rises)
        keys = self.table.insert(fresh)
        version = self.table.policy_version
        batch_size = self.step_rows
        for start in range(0, len(fresh), batch_size):
            rows = np.arange(start, min(start + batch_size, len(fresh)))
            yield Sample.from_batch(fresh.select(rows), current_version=version, keys=keys[rows])

    def metrics(self) -> dict[str, float]:
        out = {**super().metrics(), "replay/auto_ratio": self.ratio, "replay/auto_rho": self.rho}
        per_step = self.staleness.rho_per_step
        if per_step is not None:
            out["replay/auto_rho_per_step"] = per_step
        return out

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "replay_ratio": self.ratio,
            "rho": self.rho,
            "staleness": self.staleness.state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.ratio = float(state.get("replay_ratio", 1.0))
        self.rho = float(state.get("rho", self.settings.rho))
        if "staleness" in state:
            self.staleness.load_state(state["staleness"])
