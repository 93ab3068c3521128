"""Uniform replay: a FIFO buffer of N rollouts, uniform draws without removal, y draws per add."""

from __future__ import annotations

from dataclasses import dataclass

from llm_replay.methods.base import MethodContext, RatioKnobs, TableReplay, knob
from llm_replay.methods.registry import register
from llm_replay.methods.table_spec import TableSpec


@dataclass
class UniformConfig(RatioKnobs):
    replay_ratio: float = knob(2.0, "y: rollouts drawn per rollout added (y·R/B steps per round)")


@register
class UniformReplay(TableReplay[UniformConfig]):
    name = "uniform"
    description = "FIFO buffer of N rollouts, uniform draws with replacement, y draws per rollout."
    paper = "Compute-optimal replay for LLM RL, arXiv 2604.08706"
    Config = UniformConfig

    @classmethod
    def table_spec(cls, settings: UniformConfig, context: MethodContext) -> TableSpec:
        s = settings
        return TableSpec("uniform", s.capacity, {"max_age": s.max_age, "seed": context.seed})
