"""Aggregation of a [B, T] per-token loss to a scalar, separate from the loss itself.

`token_mean` (Σ loss / Σ tokens), `sequence_mean` (mean over rollouts of each rollout's token
mean), `token_sum_norm` (Σ loss / (rollouts × a constant length), Dr. GRPO). A `normalizer`
computed over the whole batch makes micro-batched gradients sum to the batch's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

AGGREGATIONS = ("token_mean", "sequence_mean", "token_sum_norm")


def normalizer(aggregation: str, mask: Tensor, sum_norm_length: int | None = None) -> float:
    """The denominator `aggregate` divides by, computed once over a whole batch."""
    if aggregation == "token_mean":
        return float(mask.sum().clamp(min=1))
    rows = float(mask.shape[0])
    if aggregation == "sequence_mean":
        return rows
    if aggregation == "token_sum_norm":
        return rows * float(sum_norm_length or mask.shape[1])
    raise ValueError(f"aggregation = {aggregation!r}: choose one of {AGGREGATIONS}")


def aggregate(
    per_token: Tensor, mask: Tensor, aggregation: str, denominator: float | None = None
) -> Tensor:
    """Reduce a [B, T] loss to a scalar; `denominator` defaults to this batch's `normalizer`."""
    denominator = denominator if denominator is not None else normalizer(aggregation, mask)
    if aggregation == "sequence_mean":
        per_row = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_row.sum() / denominator
    return (per_token * mask).sum() / denominator
