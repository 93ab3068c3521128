"""Uniform replay: a FIFO buffer of N rollouts, uniform draws without removal, y draws per add."""

from __future__ import annotations

from dataclasses import dataclass

from llm_replay.buffer import RateLimiter, ReplayTable
from llm_replay.methods.base import RatioKnobs, TableReplay, knob
from llm_replay.methods.registry import register


@dataclass
class UniformConfig(RatioKnobs):
    replay_ratio: float = knob(2.0, "y: rollouts drawn per rollout added (y·R/B steps per round)")


@register
class UniformReplay(TableReplay):
    name = "uniform"
    description = "FIFO buffer of N rollouts, uniform draws with replacement, y draws per rollout."
    paper = "Compute-optimal replay for LLM RL, arXiv 2604.08706"
    Config = UniformConfig

    def build_table(self, rate_limiter: RateLimiter | None = None) -> ReplayTable:
        s = self.settings
        assert isinstance(s, UniformConfig)
        return ReplayTable.uniform(
            s.capacity, max_age=s.max_age, rate_limiter=rate_limiter, seed=self.context.seed
        )
