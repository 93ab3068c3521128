"""`oapl`: (β·log(π_θ(y)/π_behav(y)) − A*)², A* = R − V̂* (`optimal` advantages), β = 1e-3.

OAPL (Ritter et al. 2026, "LLMs Can Learn to Reason Via Off-Policy RL", arXiv 2602.19362) after
A*-PO: KL-regularised RL against a reference π_ref has the closed form π*(y) ∝ π_ref(y)·exp(R/β),
so β·log(π*/π_ref) = R − V*, and the loss regresses the sequence log-ratio onto that target with
π_ref the policy that generated the row (the lagged inference policy). The regression holds for
rows of any age without an importance weight, which is why it suits replay; the regression's
pull toward the generating policy is its trust region. The sequence loss is given to each of the
rollout's tokens, so it needs `sequence_mean` aggregation (each rollout weighs the same, as in the
paper), and it refuses top-k/top-p truncation (a token outside the nucleus has its log-prob
floored, which would dominate the sequence's sum).
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
class OAPLConfig(LossConfig):
    beta: float = knob(1e-3, "β: the KL coefficient the sequence log-ratio is scaled by")

    def check(self) -> None:
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise LossConfigError(f"beta = {self.beta!r}: must be finite and > 0")


@register_loss
class OAPL(Loss):
    name = "oapl"
    description = "(β·log(π_θ(y)/π_behav(y)) − A*)², A* = R − β₁ log mean exp(R/β₁); no ratio"
    paper = "Ritter et al. 2026 (OAPL), arXiv 2602.19362"
    Config = OAPLConfig
    advantage = "optimal"
    aggregation = "sequence_mean"
    regresses_sequence = True

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        assert isinstance(self.settings, OAPLConfig)
        sequence_log_ratio = (x.log_ratio * x.mask).sum(-1)
        residual = self.settings.beta * sequence_log_ratio - x.advantages
        per_token = residual.square()[:, None].expand_as(x.logprobs)
        return per_token, {"residual": residual[:, None].expand_as(x.logprobs)}
