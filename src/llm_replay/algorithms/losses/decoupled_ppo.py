"""`decoupled_ppo`: AReaL's w·min(u·A, clip(u)·A), u = π_θ/π_prox, w = sg(π_prox/π_behav) ≤ cap.

The learner computes π_prox (the current weights before the step) with a no-grad forward pass,
since `needs_proximal` is set.
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
class DecoupledConfig(ClipConfig):
    decoupled_cap: float | None = knob(None, "cap on w = π_prox/π_behav; null: uncapped")

    def check(self) -> None:
        super().check()
        non_negative("decoupled_cap", self.decoupled_cap)


@register_loss
class DecoupledPPO(Loss):
    name = "decoupled_ppo"
    description = "w·min(u·A, clip(u)·A), u = π_θ/π_prox, w = sg(π_prox/π_behav) ≤ cap"
    paper = "Fu et al. 2025 (AReaL)"
    Config = DecoupledConfig
    default_clip = (0.2, 0.2)
    needs_proximal = True

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        if x.proximal_logprobs is None:
            raise ValueError("loss 'decoupled_ppo' needs proximal_logprobs")
        assert isinstance(self.settings, DecoupledConfig)
        prox = x.proximal_logprobs.detach()
        u = ((x.logprobs - prox) * x.mask).exp()
        w = ((prox - x.behaviour_logprobs) * x.mask).exp()
        if self.settings.decoupled_cap is not None:
            w = w.clamp(max=self.settings.decoupled_cap)
        per_token, clipped = clipped_surrogate(u, x.advantages[:, None], *self.clip_range())
        return w * per_token, {"ratio": u, "clip_fraction": clipped, "behaviour_weight": w}
