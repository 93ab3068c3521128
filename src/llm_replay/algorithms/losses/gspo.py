"""`gspo`: PPO's clip on the sequence ratio s = (π_θ(y)/π_behav(y))^(1/|y|), ε = 3e-4 / 4e-4.

The sequence loss is given to each of the rollout's tokens; use `sequence_mean` aggregation to
weight rollouts equally, as the paper does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import (
    ClipConfig,
    Loss,
    LossInputs,
    clipped_surrogate,
    register_loss,
)


@register_loss
class GSPO(Loss):
    name = "gspo"
    description = "min(s·A, clip(s)·A), s = (π_θ(y)/π_behav(y))^(1/|y|), ε = 3e-4/4e-4"
    paper = "Zheng et al. 2025 (GSPO)"
    Config = ClipConfig
    default_clip = (3e-4, 4e-4)

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        ratio = x.sequence_log_ratio(x.log_ratio).exp()
        per_token, clipped = clipped_surrogate(ratio, x.advantages[:, None], *self.clip_range())
        return per_token, {"ratio": ratio, "clip_fraction": clipped}
