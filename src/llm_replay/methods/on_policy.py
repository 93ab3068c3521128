"""On-policy GRPO, the baseline: a FIFO queue, every rollout trained on exactly once."""

from __future__ import annotations

from dataclasses import dataclass

from llm_replay.buffer import RateLimiter, ReplayTable
from llm_replay.methods.base import MethodConfig, TableReplay, queue_table
from llm_replay.methods.registry import register


@dataclass
class OnPolicyConfig(MethodConfig):
    """No knobs: batches of `train.batch_size` in generation order."""


@register
class OnPolicy(TableReplay):
    name = "on_policy"
    description = "The baseline: each rollout trained on once, in generation order (FIFO queue)."
    paper = "GRPO, arXiv 2402.03300"
    Config = OnPolicyConfig
    consumes_rollouts = True
    trains_fresh_groups = True
    preload_refusal = "it trains each rollout once, as it is generated: nothing to start from"

    def build_table(self, rate_limiter: RateLimiter | None = None) -> ReplayTable:
        return queue_table(self.context)
