"""The `level` knob shared by `tis` and `icepop`: a token's own ratio, or the length-normalised
sequence ratio exp(mean_t log r) (GSPO's definition, so bands and caps mean the same at any
length), shared by every token of the rollout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from torch import Tensor

from llm_replay.algorithms.losses.base import LossConfig, LossConfigError, LossInputs, knob


@dataclass(frozen=True)
class LevelConfig(LossConfig):
    level: Literal["token", "sequence"] = knob("token", "the ratio per token, or per sequence")

    def check(self) -> None:
        if self.level not in ("token", "sequence"):
            raise LossConfigError(f"level = {self.level!r}: must be 'token' or 'sequence'")


def ratio_at_level(x: LossInputs, level: str) -> Tensor:
    """The detached ratio at `level`, [B, T]."""
    log_ratio = x.log_ratio.detach()
    return (x.sequence_log_ratio(log_ratio) if level == "sequence" else log_ratio).exp()
