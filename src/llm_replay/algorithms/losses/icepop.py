"""`icepop`: sg(r)·A·log π_θ where 1/β ≤ r ≤ β, else 0; β = 5."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import (
    Loss,
    LossConfigError,
    LossInputs,
    knob,
    register_loss,
)
from llm_replay.algorithms.losses.levels import LevelConfig, ratio_at_level


@dataclass(frozen=True)
class IcePopConfig(LevelConfig):
    icepop_beta: float = knob(5.0, "β: tokens with r outside [1/β, β] are masked out")

    def check(self) -> None:
        super().check()
        if not self.icepop_beta > 1:
            raise LossConfigError(f"icepop_beta = {self.icepop_beta!r}: must be > 1")


@register_loss
class IcePop(Loss):
    name = "icepop"
    description = "sg(r)·A·log π_θ where 1/β ≤ r ≤ β, else 0; β = 5"
    paper = "Ling team 2025 (IcePop)"
    Config = IcePopConfig

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        s = self.settings
        assert isinstance(s, IcePopConfig)
        ratio = ratio_at_level(x, s.level)
        keep = ((ratio >= 1.0 / s.icepop_beta) & (ratio <= s.icepop_beta)).float()
        return -keep * ratio * x.advantages[:, None] * x.logprobs, {
            "ratio": ratio,
            "masked_fraction": 1.0 - keep,
        }
