"""`m2po`: M·r·A with no clip; M masks the tokens with the largest (log r)² (arXiv 2510.01161).

M2PO replaces the clip with a trust region on the second moment of the importance weights:
tokens are masked, largest (log r)² first, until the mean (log r)² of the tokens left is at most
`m2_threshold`, so only extreme outliers lose their gradient. The mask is computed over the
tokens of one loss call (a micro-batch when the learner splits a batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import (
    Loss,
    LossConfig,
    LossInputs,
    knob,
    non_negative,
    register_loss,
)


@dataclass(frozen=True)
class M2POConfig(LossConfig):
    m2_threshold: float = knob(0.04, "τ: the mean (log r)² allowed over the tokens kept")

    def check(self) -> None:
        non_negative("m2_threshold", self.m2_threshold)


def second_moment_mask(log_ratio: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """1 for the tokens M2PO keeps: drop the largest (log r)² first until the mean of the rest is
    at most `threshold` (a mean over fewer tokens after each drop; ties dropped in index order)."""
    squared = (log_ratio.detach() ** 2)[mask > 0]
    keep = mask.new_zeros(mask.shape)
    if squared.numel() == 0:
        return keep
    ordered, order = squared.sort(descending=True, stable=True)
    suffix = ordered.flip(0).cumsum(0).flip(0)  # sum of ordered[k:]
    suffix_mean = suffix / ordered.new_ones(len(ordered)).cumsum(0).flip(0)  # n, n-1, ..., 1
    within = suffix_mean <= threshold
    dropped = int(within.long().argmax()) if bool(within.any()) else len(ordered)
    kept = ordered.new_ones(ordered.shape)
    kept[:dropped] = 0
    flat = ordered.new_empty(ordered.shape)
    flat[order] = kept
    keep[mask > 0] = flat
    return keep


@register_loss
class M2PO(Loss):
    name = "m2po"
    description = "M·r·A, no clip; M masks the top (log r)² tokens until their mean ≤ τ"
    paper = "Zheng et al. 2025 (M2PO), arXiv 2510.01161"
    Config = M2POConfig

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        assert isinstance(self.settings, M2POConfig)
        log_ratio = x.log_ratio
        ratio = log_ratio.exp()
        keep = second_moment_mask(log_ratio, x.mask, self.settings.m2_threshold)
        return -keep * ratio * x.advantages[:, None], {
            "ratio": ratio,
            "masked_fraction": 1.0 - keep,
        }
