"""On-policy GRPO, the baseline: a FIFO queue, every rollout trained on exactly once."""

from __future__ import annotations

from dataclasses import dataclass

from llm_replay.methods.base import MethodConfig, MethodContext, TableReplay, queue_spec
from llm_replay.methods.registry import register
from llm_replay.methods.table_spec import TableSpec


@dataclass
class OnPolicyConfig(MethodConfig):
    """No knobs: batches of `train.batch_size` in generation order."""


@register
class OnPolicy(TableReplay[OnPolicyConfig]):
    name = "on_policy"
    description = "The baseline: each rollout trained on once, in generation order (FIFO queue)."
    paper = "GRPO, arXiv 2402.03300"
    Config = OnPolicyConfig
    consumes_rollouts = True
    trains_fresh_groups = True
    scales_replay = False  # it replays nothing, so there is no replay to move toward on-policy
    preload_refusal = "it trains each rollout once, as it is generated: nothing to start from"

    @classmethod
    def table_spec(cls, settings: OnPolicyConfig, context: MethodContext) -> TableSpec:
        return queue_spec(context)
