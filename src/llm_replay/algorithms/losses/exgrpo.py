"""`exgrpo`: ExGRPO's mixed-policy objective (arXiv 2510.02245, after LUFFY's policy shaping).

The rows a method marked as replayed (`Sample.sources > 0`) are trained on the shaped, unclipped
ratio f(r) = r/(r + β), whose gradient β/(r+β)² · r · ∇log π_θ amplifies low-probability tokens
and damps confident ones; fresh rows keep GRPO's clip. Without the mark every row is fresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import (
    ClipConfig,
    Loss,
    LossInputs,
    clipped_surrogate,
    knob,
    non_negative,
    register_loss,
)


@dataclass(frozen=True)
class ExGRPOConfig(ClipConfig):
    shaping_beta: float = knob(0.1, "β of the shaping f(r) = r/(r + β) on replayed rows")

    def check(self) -> None:
        super().check()
        non_negative("shaping_beta", self.shaping_beta, strict=True)


@register_loss
class ExGRPOLoss(Loss):
    name = "exgrpo"
    description = "fresh rows: grpo; replayed rows: f(r)·A, f(r) = r/(r+β), β = 0.1"
    paper = "Zhan et al. 2025 (ExGRPO), arXiv 2510.02245"
    Config = ExGRPOConfig
    default_clip = (0.2, 0.2)

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        assert isinstance(self.settings, ExGRPOConfig)
        ratio = x.log_ratio.exp()
        fresh, clipped = clipped_surrogate(ratio, x.advantages[:, None], *self.clip_range())
        shaped = -(ratio / (ratio + self.settings.shaping_beta)) * x.advantages[:, None]
        if x.replayed is None:
            replayed = x.mask.new_zeros(x.mask.shape)
        else:
            replayed = x.replayed.to(x.mask.dtype)[:, None].expand_as(x.mask)
        per_token = shaped.where(replayed > 0, fresh)
        return per_token, {
            "ratio": ratio,
            "clip_fraction": clipped * (1.0 - replayed),
            "shaped_fraction": replayed,
        }
