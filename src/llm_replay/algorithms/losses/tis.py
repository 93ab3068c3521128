"""`tis`: truncated importance sampling, sg(min(r, C))·A·log π_θ, C = 2."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import Loss, LossInputs, knob, non_negative, register_loss
from llm_replay.algorithms.losses.levels import LevelConfig, ratio_at_level


@dataclass(frozen=True)
class TISConfig(LevelConfig):
    tis_cap: float = knob(2.0, "C: the importance weight is truncated at C")

    def check(self) -> None:
        super().check()
        non_negative("tis_cap", self.tis_cap, strict=True)


@register_loss
class TIS(Loss):
    name = "tis"
    description = "sg(min(r, C))·A·log π_θ, C = 2"
    paper = "Yao et al. 2025 (truncated importance sampling)"
    Config = TISConfig

    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        s = self.settings
        assert isinstance(s, TISConfig)
        ratio = ratio_at_level(x, s.level)
        weight = ratio.clamp(max=s.tis_cap)
        return -weight * x.advantages[:, None] * x.logprobs, {
            "ratio": ratio,
            "truncated_fraction": (ratio > s.tis_cap).float(),
        }
