"""`cispo`: sg(clip(r, 1−ε_low, 1+ε_high))·A·log π_θ, ε = 1 / 0.28: the weight is clipped, never
the gradient."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import ClipConfig, Loss, LossInputs, register_loss


@register_loss
class CISPO(Loss):
    name = "cispo"
    description = "sg(clip(r, 1−ε_low, 1+ε_high))·A·log π_θ, ε = 1/0.28"
    paper = "MiniMax-M1 2025 (CISPO)"
    Config = ClipConfig
    default_clip = (1.0, 0.28)

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        ratio = x.log_ratio.detach().exp()
        weight = ratio.clamp(*self.clip_range())
        return -weight * x.advantages[:, None] * x.logprobs, {
            "ratio": ratio,
            "clip_fraction": (weight != ratio).float(),
        }
