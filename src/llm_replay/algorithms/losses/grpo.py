"""`grpo`: PPO's clipped surrogate against the behaviour log-probs, ε = 0.2 / 0.2."""

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


class PPOClip(Loss):
    """min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) against the behaviour log-probs."""

    Config = ClipConfig

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        ratio = x.log_ratio.exp()
        per_token, clipped = clipped_surrogate(ratio, x.advantages[:, None], *self.clip_range())
        return per_token, {"ratio": ratio, "clip_fraction": clipped}


@register_loss
class GRPO(PPOClip):
    name = "grpo"
    description = "min(r·A, clip(r, 1−ε_low, 1+ε_high)·A), ε = 0.2/0.2"
    paper = "Shao et al. 2024 (DeepSeekMath, GRPO)"
    default_clip = (0.2, 0.2)
    trl_loss = "trl"
