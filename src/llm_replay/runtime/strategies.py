"""Replay strategies: how the fresh rollouts of one iteration become the batches trained on.

Each strategy owns its table(s) and yields `Sample`s lazily, so the loop can run a gradient step
(and advance the policy version, which ages and evicts stored rollouts) between two draws.

- `on_policy`: a FIFO queue, each rollout used exactly once — the baseline.
- `uniform`: FIFO buffer of `capacity` rollouts, uniform draws without removal; `replay_ratio`
  y = rollouts drawn per rollout added, i.e. y·R/B gradient steps per iteration (arXiv 2604.08706).
- `positive`: as uniform, but the buffer keeps the freshest (1−δ)N rollouts plus the freshest δN
  correct ones; pair it with the `asymre` loss (arXiv 2604.08706).
- `prioritized`: single rollouts with P ∝ (|A|+ε)^α frozen at birth, evicted after `max_age`
  learner steps; each batch is every fresh rollout plus round(fresh_ratio·R) replayed ones
  (fresh-anchored; arXiv 2606.04560).
- `rlep`: phase I trains on-policy and collects verified successes; phase II restarts from the
  base model and trains each group's G fresh rollouts with M replayed successes of the same prompt,
  advantages re-standardised over all G+M (arXiv 2507.07451). The loop performs the restart.

Fractional steps carry over: the strategy keeps a credit of rollouts owed to the learner.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.buffer import FreshAnchored, ReplayTable, RLEPBlend, Sample, SuccessPool
from llm_replay.config import Config
from llm_replay.rollout import RolloutBatch

TABLE_DIR = "table"
POOL_DIR = "pool"


class Strategy:
    """Base: one table, credit-based draws of `batch_size` rollouts."""

    name = "base"

    def __init__(self, table: ReplayTable, *, replay_ratio: float, batch_size: int) -> None:
        self.table = table
        self.replay_ratio = replay_ratio
        self.batch_size = batch_size
        self.credit = 0.0

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        self.table.insert(fresh)
        self.credit += self.replay_ratio * len(fresh)
        while self.credit >= self.batch_size - 1e-9:
            self.credit -= self.batch_size
            yield self.table.sample(self.batch_size)

    def set_policy_version(self, version: int) -> None:
        self.table.set_policy_version(version)

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.table.stats().metrics().items()}

    def state(self) -> dict[str, Any]:
        return {"credit": self.credit}

    def save(self, directory: Path) -> None:
        self.table.save(directory / TABLE_DIR)
        (directory / "strategy.json").write_text(json.dumps(self.state()))

    def load(self, directory: Path) -> None:
        self.table = ReplayTable.load(directory / TABLE_DIR)
        self.credit = float(json.loads((directory / "strategy.json").read_text())["credit"])


class OnPolicy(Strategy):
    name = "on_policy"


class UniformReplay(Strategy):
    name = "uniform"


class PositiveReplay(Strategy):
    name = "positive"


class AutoReplay(Strategy):
    """Uniform replay whose ratio follows the compute-optimal rule of arXiv 2604.08706.

    y* = μ / (ρ + 1/x): reuse grows with μ (generation cost / training cost per rollout) and
    shrinks with the staleness cost ρ; x = N/R is the buffer's horizon in iterations. μ is the run's
    measured value (or `replay.auto.mu`, to plan for other hardware) and is re-read every
    iteration, so y follows μ as it changes. y is clipped to [1, max_ratio]: below 1 the learner
    would skip fresh data, which no compute saving justifies; at y = 1 it trains on exactly the
    fresh rollouts, on-policy.
    """

    name = "auto"

    def __init__(
        self,
        table: ReplayTable,
        *,
        batch_size: int,
        rho: float,
        horizon: float,
        max_ratio: float,
        mu: float | None,
    ) -> None:
        super().__init__(table, replay_ratio=1.0, batch_size=batch_size)
        self.rho, self.horizon, self.max_ratio, self.fixed_mu = rho, horizon, max_ratio, mu
        self.mu_source: Callable[[], float | None] = lambda: None

    def choose_ratio(self, mu: float | None) -> float:
        if mu is None:
            return 1.0
        return float(min(self.max_ratio, max(1.0, mu / (self.rho + 1.0 / self.horizon))))

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        mu = self.fixed_mu if self.fixed_mu is not None else self.mu_source()
        self.replay_ratio = self.choose_ratio(mu)
        if self.replay_ratio > 1.0:
            yield from super().batches(fresh)
            return
        # y = 1: no reuse pays, so train on-policy on exactly the fresh rollouts (kept in the
        # buffer all the same, so reuse can start at once when μ rises)
        keys = self.table.insert(fresh)
        version = self.table.policy_version
        for start in range(0, len(fresh), self.batch_size):
            rows = np.arange(start, min(start + self.batch_size, len(fresh)))
            yield Sample.from_batch(fresh.select(rows), current_version=version, keys=keys[rows])

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "replay/auto_ratio": self.replay_ratio}

    def state(self) -> dict[str, Any]:
        return {**super().state(), "replay_ratio": self.replay_ratio}


class PrioritizedReplay(Strategy):
    """Fresh-anchored: one batch per iteration = fresh + round(fresh_ratio · fresh) replayed."""

    name = "prioritized"

    def __init__(self, table: ReplayTable, *, fresh_ratio: float) -> None:
        super().__init__(table, replay_ratio=1.0, batch_size=1)
        self.fresh_ratio = fresh_ratio

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        yield FreshAnchored(self.table, self.fresh_ratio).compose(fresh)


class RLEP(Strategy):
    """Phase I: on-policy + success collection. Phase II: fresh + M successes per group."""

    name = "rlep"

    def __init__(
        self,
        table: ReplayTable,
        pool: SuccessPool,
        *,
        phase1_iterations: int,
        replay_per_group: int,
        estimator: str,
        batch_size: int,
    ) -> None:
        super().__init__(table, replay_ratio=1.0, batch_size=batch_size)
        self.pool = pool
        self.phase1_iterations = phase1_iterations
        self.blend = RLEPBlend(pool, replay_per_group, estimator)
        self.iterations_seen = 0
        self.replayed_last = 0
        self.phase_last = 1

    @property
    def phase(self) -> int:
        return 1 if self.iterations_seen < self.phase1_iterations else 2

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        phase = self.phase_last = self.phase
        self.iterations_seen += 1
        if phase == 1:
            self.pool.add(fresh)
            yield from super().batches(fresh)
            return
        blended = self.blend.compose(fresh)
        self.replayed_last = int((self.blend.last_sources == 1).sum())
        yield Sample.from_batch(blended, current_version=self.table.policy_version)

    def restart_due(self) -> bool:
        """True right after the last phase-I iteration: the loop restarts from the base model."""
        return self.phase1_iterations > 0 and self.iterations_seen == self.phase1_iterations

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out["rlep/phase"] = float(self.phase_last)
        out["rlep/pool_rollouts"] = float(len(self.pool))
        out["rlep/pool_prompts"] = float(self.pool.num_prompts)
        out["rlep/replayed_in_batch"] = float(self.replayed_last)
        return out

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "iterations_seen": self.iterations_seen,
            "pool_rng": self.pool.rng_state(),
        }

    def save(self, directory: Path) -> None:
        super().save(directory)
        self.pool.save(directory / POOL_DIR)

    def load(self, directory: Path) -> None:
        super().load(directory)
        state = json.loads((directory / "strategy.json").read_text())
        self.iterations_seen = int(state["iterations_seen"])
        self.pool = SuccessPool.load(directory / POOL_DIR, min_correct=self.pool.min_correct)
        self.pool.set_rng_state(state["pool_rng"])
        self.blend = RLEPBlend(self.pool, self.blend.m, self.blend.estimator)


def build_strategy(config: Config) -> Strategy:
    """The strategy and table(s) named by `config.replay`."""
    r, t = config.replay, config.train
    fresh = config.generation.rollouts_per_step
    seed = config.train.seed
    if r.strategy in ("on_policy", "rlep"):
        table = ReplayTable.queue(
            fresh + t.batch_size, max_insert_batch=fresh, max_sample_batch=t.batch_size, seed=seed
        )
        if r.strategy == "on_policy":
            return OnPolicy(table, replay_ratio=1.0, batch_size=t.batch_size)
        pool = SuccessPool(r.rlep.pool_capacity, min_correct=r.rlep.min_correct, seed=seed)
        if r.rlep.pool_path:
            pool = SuccessPool.load(r.rlep.pool_path, min_correct=r.rlep.min_correct, seed=seed)
        return RLEP(
            table,
            pool,
            phase1_iterations=0 if r.rlep.pool_path else r.rlep.phase1_iterations,
            replay_per_group=r.rlep.replay_per_group,
            estimator=config.algorithm.advantage,
            batch_size=t.batch_size,
        )
    if r.strategy == "uniform":
        table = ReplayTable.uniform(r.capacity, max_age=r.max_age, seed=seed)
        return UniformReplay(table, replay_ratio=r.replay_ratio, batch_size=t.batch_size)
    if r.strategy == "positive":
        table = ReplayTable.positive_biased(r.capacity, delta=r.delta, max_age=r.max_age, seed=seed)
        return PositiveReplay(table, replay_ratio=r.replay_ratio, batch_size=t.batch_size)
    if r.strategy == "auto":
        capacity = max(t.batch_size, round(r.auto.horizon * fresh))
        return AutoReplay(
            ReplayTable.uniform(capacity, max_age=r.max_age, seed=seed),
            batch_size=t.batch_size,
            rho=r.auto.rho,
            horizon=r.auto.horizon,
            max_ratio=r.auto.max_ratio,
            mu=r.auto.mu,
        )
    if r.strategy == "prioritized":
        table = ReplayTable.prioritized(
            r.capacity, alpha=r.alpha, beta=r.beta, max_age=r.max_age, seed=seed
        )
        return PrioritizedReplay(table, fresh_ratio=r.fresh_ratio)
    raise ValueError(f"replay.strategy = {r.strategy!r}")  # pragma: no cover - config validates
