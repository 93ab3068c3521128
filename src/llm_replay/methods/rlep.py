"""RLEP: replay verified successes of the same prompt beside each fresh group.

Phase I trains on-policy and collects verified successes in a `SuccessPool`; phase II restarts
from the base model and trains each group's G fresh rollouts with M replayed successes of the same
prompt, advantages re-standardised over all G + M. The caller performs the restart when
`restart_due()` says so. With `pool_path` a pool collected earlier is loaded and phase I skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.buffer import ReplayTable, Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfig,
    MethodContext,
    TableReplay,
    knob,
    positive,
    queue_spec,
)
from llm_replay.methods.registry import register
from llm_replay.methods.success_pool import SuccessPool
from llm_replay.methods.table_spec import TableSpec

POOL_DIR = "pool"


class RLEPBlend:
    """Per group: its G fresh rollouts plus up to M verified successes of the same prompt.

    Advantages of the blended group are recomputed over all G + M rewards with `estimator`
    (RLEP standardises over the union). Groups whose prompt has no stored success stay as they are.
    """

    def __init__(
        self, pool: SuccessPool, replay_per_group: int = 2, estimator: str = "grpo"
    ) -> None:
        if isinstance(replay_per_group, bool) or replay_per_group < 0:
            raise ValueError(f"replay_per_group = {replay_per_group!r}: must be >= 0")
        self.pool = pool
        self.m = int(replay_per_group)
        self.estimator = estimator
        self.last_sources = np.zeros(0, dtype=np.int8)

    def compose(self, fresh: RolloutBatch) -> RolloutBatch:
        fresh = RolloutBatch.coerce(fresh)
        parts: list[RolloutBatch] = []
        sources: list[np.ndarray] = []
        for group in np.unique(fresh.group_ids).tolist():
            members = fresh.select(np.flatnonzero(fresh.group_ids == group))
            parts.append(members)
            sources.append(np.zeros(len(members), dtype=np.int8))
            replayed = self.pool.draw(members.prompt_ids[: members.prompt_lengths[0]], self.m)
            if replayed is not None:
                relabelled = dataclasses.replace(
                    replayed, group_ids=np.full(len(replayed), group, np.int64)
                )
                parts.append(relabelled)
                sources.append(np.ones(len(replayed), dtype=np.int8))
        blended = RolloutBatch.concat(parts)
        advantages = group_advantages(blended.rewards, blended.group_ids, self.estimator)
        self.last_sources = np.concatenate(sources)
        return blended.with_advantages(advantages)


@dataclass
class RLEPConfig(MethodConfig):
    phase1_iterations: int = knob(20, "rounds of phase I (on-policy, collecting successes)")
    replay_per_group: int = knob(2, "M: successes replayed beside each fresh group")
    min_correct: int = knob(2, "a group's successes enter the pool when it has this many")
    pool_capacity: int = knob(100_000, "successes kept")
    pool_path: str | None = knob(None, "a saved pool: load it and skip phase I")

    def check(self) -> None:
        positive("phase1_iterations", self.phase1_iterations, zero_ok=True)
        positive("replay_per_group", self.replay_per_group)
        positive("min_correct", self.min_correct)
        positive("pool_capacity", self.pool_capacity)


@register
class RLEP(TableReplay[RLEPConfig]):
    name = "rlep"
    description = "Phase I collects verified successes; phase II replays M per group from base."
    paper = "RLEP: RL with experience replay, arXiv 2507.07451"
    Config = RLEPConfig
    scales_replay = False  # its pool draws are per prompt, not a ratio
    async_batches = "rounds"  # composes its own batches each round
    credit_steps = False  # phase II trains one blended batch a round
    trains_fresh_groups = True
    preload_refusal = "its reuse is the success pool: pass a saved pool as replay.pool_path"

    def __init__(self, settings: MethodConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        s = self.rlep
        if s.pool_path:
            self.pool = SuccessPool.load(s.pool_path, min_correct=s.min_correct, seed=context.seed)
        else:
            self.pool = SuccessPool(s.pool_capacity, min_correct=s.min_correct, seed=context.seed)
        self.phase1_iterations = 0 if s.pool_path else s.phase1_iterations
        self.restarts = self.phase1_iterations > 0
        self.blend = RLEPBlend(self.pool, s.replay_per_group, context.advantage)
        self.iterations_seen = 0
        self.replayed_last = 0
        self.phase_last = 1

    @property
    def rlep(self) -> RLEPConfig:
        return self.settings

    @classmethod
    def async_refusal(cls, settings: MethodConfig) -> str | None:
        if not isinstance(settings, RLEPConfig):
            raise TypeError(f"settings = {settings!r}: expected RLEPConfig")
        if settings.phase1_iterations > 0 and not settings.pool_path:
            return (
                "phase II restarts from the base model, and rounds generated by the phase-I "
                "policy would still be in flight; collect the pool in a sync run and pass "
                "replay.pool_path (phase I is then skipped)"
            )
        return None

    @classmethod
    def table_spec(cls, settings: RLEPConfig, context: MethodContext) -> TableSpec:
        return queue_spec(context)

    @property
    def phase(self) -> int:
        return 1 if self.iterations_seen < self.phase1_iterations else 2

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        phase = self.phase_last = self.phase
        self.iterations_seen += 1
        if phase == 1:
            self.pool.add(fresh)
            yield from self.draw(fresh, 1.0)
            return
        blended = self.blend.compose(fresh)
        self.replayed_last = int((self.blend.last_sources == 1).sum())
        yield Sample.from_batch(blended, current_version=self.table.policy_version)

    def restart_due(self) -> bool:
        """True right after the last phase-I round: the caller restarts from the base model."""
        return self.phase1_iterations > 0 and self.iterations_seen == self.phase1_iterations

    def stored_tables(self) -> list[ReplayTable]:
        return [*super().stored_tables(), self.pool.table]

    def metrics(self) -> dict[str, float]:
        return {
            **super().metrics(),
            "rlep/phase": float(self.phase_last),
            "rlep/pool_rollouts": float(len(self.pool)),
            "rlep/pool_prompts": float(self.pool.num_prompts),
            "rlep/replayed_in_batch": float(self.replayed_last),
        }

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
        self.pool = SuccessPool.load(directory / POOL_DIR, min_correct=self.pool.min_correct)
        self.blend = RLEPBlend(self.pool, self.blend.m, self.blend.estimator)
        super().load(directory)

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.iterations_seen = int(state["iterations_seen"])
        self.pool.set_rng_state(state["pool_rng"])
