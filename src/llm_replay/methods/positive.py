"""Positive-biased replay: keep the freshest (1−δ)N rollouts plus the freshest δN correct ones.

Pair it with the AsymRE loss (`algorithm.loss: asymre`, `algorithm.advantage: dr_grpo`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_replay.buffer import PositiveRetention, TaskCapacity
from llm_replay.methods.base import MethodConfigError, MethodContext, RatioKnobs, TableReplay, knob
from llm_replay.methods.registry import register
from llm_replay.methods.table_spec import TableSpec


@dataclass
class PositiveConfig(RatioKnobs):
    replay_ratio: float = knob(2.0, "y: rollouts drawn per rollout added (y·R/B steps per round)")
    delta: float = knob(0.5, "δ: share of the buffer reserved for correct rollouts")

    def check(self) -> None:
        super().check()
        if not 0 <= self.delta <= 1:
            raise MethodConfigError(f"delta = {self.delta!r}: must be in [0, 1]")


@register
class PositiveReplay(TableReplay[PositiveConfig]):
    name = "positive"
    description = "Buffer keeps the freshest (1−δ)N plus the freshest δN correct rollouts."
    paper = "Compute-optimal replay for LLM RL (positive bias + AsymRE), arXiv 2604.08706"
    Config = PositiveConfig

    @classmethod
    def table_spec(cls, settings: PositiveConfig, context: MethodContext) -> TableSpec:
        s = settings
        return TableSpec(
            "positive_biased",
            s.capacity,
            {"delta": s.delta, "max_age": s.max_age, "seed": context.seed},
        )

    def set_replay_scale(self, scale: float) -> None:
        """y toward 1 and δ toward 0 together: at scale 0 the buffer is a plain FIFO window
        sampled once per rollout added, on-policy in expectation."""
        super().set_replay_scale(scale)
        remover = self.table.remover
        if isinstance(remover, TaskCapacity):  # `replay.tasks.capacity` wraps the retention
            remover = remover.inner
        if isinstance(remover, PositiveRetention):
            remover.set_delta(scale * self.settings.delta)
