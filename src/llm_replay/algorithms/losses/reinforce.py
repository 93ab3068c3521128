"""`reinforce`: A·log π_θ, on-policy only (no correction for stale rollouts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import Loss, LossInputs, register_loss


@register_loss
class Reinforce(Loss):
    name = "reinforce"
    description = "A·log π_θ; on-policy only (no correction)"
    paper = "Williams 1992 (REINFORCE)"
    reads_behaviour = False

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        return -x.advantages[:, None] * x.logprobs, {}
