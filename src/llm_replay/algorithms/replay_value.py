"""The replay-gradient reading pooled over a run (`gradient_alignment.py` says what it reads).

Kept apart from the learner's torch side so that a method option can pool it without torch.
"""

from __future__ import annotations

import math
from typing import Any


class ReplayValue:
    """The run's pooled reading: value = Σ replay_t / Σ fresh_t over the steps read, and its
    standard error by the ratio estimator's delta method (residuals replay_t − value·fresh_t)."""

    def __init__(self) -> None:
        self.steps = 0
        self.sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # Σr, Σf, Σr², Σf², Σrf

    def add(self, replay: float, fresh: float) -> None:
        if not (math.isfinite(replay) and math.isfinite(fresh)):
            return
        self.steps += 1
        for i, v in enumerate((replay, fresh, replay * replay, fresh * fresh, replay * fresh)):
            self.sums[i] += v

    def estimate(self) -> tuple[float, float] | None:
        """(value, its standard error), or None below three steps or while the fresh rows'
        pooled agreement with themselves is not positive (no unit to read replay in)."""
        n = self.steps
        r, f, rr, ff, rf = self.sums
        if n < 3 or f <= 0:
            return None
        value = r / f
        residual_sq = rr - 2 * value * rf + value * value * ff
        error = math.sqrt(max(residual_sq, 0.0) * n / (n - 1)) / f
        return value, error

    def state(self) -> dict[str, Any]:
        return {"steps": self.steps, "sums": list(self.sums)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.sums = [float(v) for v in state["sums"]]
