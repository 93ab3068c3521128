"""`asymre`: (A − δV)·log π_θ with A = R − V̂ (dr_grpo advantages), δV = −0.1; no ratio.

Positive-biased replay's loss (arXiv 2604.08706 after AsymRE): a baseline shifted below the group
mean makes the update asymmetric, so stale successes are reinforced without an importance ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import (
    Loss,
    LossConfig,
    LossConfigError,
    LossInputs,
    knob,
    register_loss,
)


@dataclass(frozen=True)
class AsymREConfig(LossConfig):
    delta_v: float = knob(-0.1, "δV: the baseline V̂ + δV; negative favours successes")

    def check(self) -> None:
        if not math.isfinite(self.delta_v):
            raise LossConfigError(f"delta_v = {self.delta_v!r}: must be finite")


@register_loss
class AsymRE(Loss):
    name = "asymre"
    description = "(A − δV)·log π_θ, δV = −0.1; expects A = R − V̂ (dr_grpo); no ratio"
    paper = "Arnal et al. 2025 (AsymRE)"
    Config = AsymREConfig
    advantage = "dr_grpo"
    trl_loss = "asymre"
    reads_behaviour = False

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        assert isinstance(self.settings, AsymREConfig)
        return -(x.advantages[:, None] - self.settings.delta_v) * x.logprobs, {}
