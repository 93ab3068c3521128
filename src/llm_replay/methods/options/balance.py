"""Balanced replay: keep the replayed positive and negative advantage mass in the fresh round's
proportion (after FADE, arXiv 2607.01490).

Replay that favours successes (positive-biased retention, success pools) adds positive gradient
mass only: the policy sharpens on what it already gets right and its entropy collapses, which is
where positive-biased replay's spell_backward plateau sits (half on-policy's entropy,
docs/RESULTS.md). This option rescales the positive advantages of the replayed rows of every
trained batch (rows not from this round's fresh groups) by

    c = clip(s·N_r / ((1 − s)·P_r), floor, 1),   s = P_f / (P_f + N_f),

where P and N are the summed positive and |negative| advantages of the fresh round (f) and of the
batch's replayed rows (r), so the replayed positive share c·P_r / (c·P_r + N_r) equals the fresh
round's s. With group-centred advantages s = 1/2: replayed successes weigh no more than replayed
failures. It only ever scales positives down (c ≤ 1); `floor` keeps some of them where the
replayed rows are all successes (N_r = 0 gives c = `floor`). Logged: `balance/scale` (the last
batch's c) and `balance/positive_share` (the replayed positive share before rescaling).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfigError,
    MethodContext,
    MethodOption,
    OptionConfig,
    knob,
)
from llm_replay.methods.registry import register_option


@dataclass
class BalanceConfig(OptionConfig):
    floor: float = knob(0.0, "smallest factor on a replayed positive advantage")

    def check(self) -> None:
        if not (math.isfinite(self.floor) and 0.0 <= self.floor <= 1.0):
            raise MethodConfigError(f"floor = {self.floor!r}: must be in [0, 1]")


def masses(advantages: np.ndarray) -> tuple[float, float]:
    """(summed positive, summed |negative|) of the finite advantages."""
    a = advantages[np.isfinite(advantages)]
    return float(a[a > 0].sum()), float(-a[a < 0].sum())


def positive_scale(
    fresh: tuple[float, float], replayed: tuple[float, float], floor: float
) -> float:
    """c of the module docstring: 1 where there is nothing to balance."""
    (p_f, n_f), (p_r, n_r) = fresh, replayed
    if p_r <= 0 or p_f + n_f <= 0:
        return 1.0
    share = p_f / (p_f + n_f)
    if share >= 1.0:
        return 1.0
    return float(min(1.0, max(floor, share * n_r / ((1.0 - share) * p_r))))


@register_option
class BalancedReplay(MethodOption[BalanceConfig]):
    name = "balance"
    description = "Rescale replayed positive advantages to the fresh round's positive share."
    paper = "FADE, arXiv 2607.01490"
    Config = BalanceConfig
    adjusts_samples = True

    def __init__(self, settings: OptionConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        self.fresh_groups = np.zeros(0, dtype=np.int64)
        self.fresh_mass = (0.0, 0.0)
        self.last = {"balance/scale": 1.0}

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        self.fresh_groups = np.unique(fresh.group_ids)
        self.fresh_mass = masses(fresh.advantages)
        return fresh

    def adjust(self, sample: Sample) -> Sample:
        replayed = ~np.isin(sample.group_ids, self.fresh_groups)
        if not replayed.any():
            return sample
        mass = masses(sample.advantages[replayed])
        scale = positive_scale(self.fresh_mass, mass, self.settings.floor)
        if sum(mass) > 0:
            self.last = {"balance/scale": scale, "balance/positive_share": mass[0] / sum(mass)}
        if scale == 1.0:
            return sample
        advantages = sample.advantages.copy()
        advantages[replayed & (advantages > 0)] *= scale
        return dataclasses.replace(sample, advantages=advantages)

    def metrics(self) -> dict[str, float]:
        return dict(self.last)
