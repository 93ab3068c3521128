"""`bapo`: PPO's clipped surrogate with clip bounds chosen per batch so positives are not drowned.

BAPO (Xi et al. 2025, "Balanced Policy Optimization with Adaptive Clipping", arXiv 2510.18927):
in off-policy batches (replayed rows, partial rollouts) negative-advantage tokens dominate the
policy gradient, and PPO's fixed clip blocks the low-probability positive tokens whose updates
would raise entropy (their Entropy-Clip Rule). BAPO moves the clip bounds on the ratio
r = π_θ/π_behav, per batch, until the positive tokens carry a target share ρ₀ of the
gradient-carrying contribution:

- a token carries gradient under min(r·A, clip(r, c_low, c_high)·A) when A > 0 and r ≤ c_high,
  or A < 0 and r ≥ c_low; its contribution is |r·A|;
- share = Σ over carrying positive tokens / Σ over all carrying tokens;
- starting from (c_low, c_high) = (`low_start`, `high_start`), while share < ρ₀, c_low rises by
  `low_step` (up to `low_max`: fewer negatives carry) and c_high by `high_step` (up to
  `high_max`: more positives carry), both in the same pass, as the paper's algorithm does; it
  stops when the share is met or neither bound can move.

The paper's defaults: ρ₀ = 0.4, c_low in [0.6, 0.9], c_high in [1.2, 3.0]; the step sizes
(0.02 and 0.05) are ours. The bounds are chosen on the detached ratios, so the choice carries no
gradient; `bapo_low`, `bapo_high` and `bapo_positive_share` (after the choice) are logged.
A batch with no negative contribution has share 1 and keeps the starting bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import (
    Loss,
    LossConfig,
    LossConfigError,
    LossInputs,
    clipped_surrogate,
    knob,
    register_loss,
)


@dataclass(frozen=True)
class BAPOConfig(LossConfig):
    target: float = knob(0.4, "ρ₀: the share of the gradient-carrying contribution positives get")
    low_start: float = knob(0.6, "c_low where the search starts (a ratio bound, not an ε)")
    low_max: float = knob(0.9, "the highest c_low the search may reach")
    low_step: float = knob(0.02, "how far c_low rises each pass")
    high_start: float = knob(1.2, "c_high where the search starts")
    high_max: float = knob(3.0, "the highest c_high the search may reach")
    high_step: float = knob(0.05, "how far c_high rises each pass")

    def check(self) -> None:
        if not 0.0 < self.target < 1.0:
            raise LossConfigError(f"target = {self.target!r}: must be in (0, 1)")
        if not 0.0 < self.low_start <= self.low_max < 1.0:
            raise LossConfigError(
                f"low_start = {self.low_start!r}, low_max = {self.low_max!r}: need "
                "0 < low_start <= low_max < 1"
            )
        if not 1.0 < self.high_start <= self.high_max:
            raise LossConfigError(
                f"high_start = {self.high_start!r}, high_max = {self.high_max!r}: need "
                "1 < high_start <= high_max"
            )
        for name in ("low_step", "high_step"):
            value = getattr(self, name)
            if not value > 0:
                raise LossConfigError(f"{name} = {value!r}: must be > 0")


def choose_bounds(
    ratio: Tensor, adv: Tensor, mask: Tensor, s: BAPOConfig
) -> tuple[float, float, float]:
    """(c_low, c_high, share) by the search in the module docstring: each pass reads only which
    tokens carry gradient under the new bounds; their |r·A| is taken once."""
    weight = (ratio * adv).abs() * mask
    positive_weight, positive_ratio = weight[adv > 0], ratio[adv > 0]
    negative_weight, negative_ratio = weight[adv < 0], ratio[adv < 0]

    def share_at(low: float, high: float) -> float:
        pos = float(positive_weight[positive_ratio <= high].sum())
        neg = float(negative_weight[negative_ratio >= low].sum())
        return 1.0 if neg == 0.0 else pos / (pos + neg)

    low, high = s.low_start, s.high_start
    share = share_at(low, high)
    while share < s.target:
        new_low = min(round(low + s.low_step, 10), s.low_max)
        new_high = min(round(high + s.high_step, 10), s.high_max)
        if new_low == low and new_high == high:
            break
        low, high = new_low, new_high
        share = share_at(low, high)
    return low, high, share


@register_loss
class BAPO(Loss):
    name = "bapo"
    description = (
        "min(r·A, clip(r, c_low, c_high)·A), bounds moved per batch to a positive share ρ₀"
    )
    paper = "Xi et al. 2025 (BAPO, arXiv 2510.18927)"
    Config = BAPOConfig

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        s = self.settings
        assert isinstance(s, BAPOConfig)
        ratio = x.log_ratio.exp()
        adv = x.advantages[:, None].expand_as(ratio)
        low, high, share = choose_bounds(ratio.detach(), adv, x.mask, s)
        per_token, clipped = clipped_surrogate(ratio, x.advantages[:, None], low, high)
        return per_token, {
            "ratio": ratio,
            "clip_fraction": clipped,
            "bapo_low": ratio.new_full(ratio.shape, low),
            "bapo_high": ratio.new_full(ratio.shape, high),
            "bapo_positive_share": ratio.new_full(ratio.shape, share),
        }
