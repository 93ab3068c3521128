"""The replay-gradient reading pooled over a run (`gradient_alignment.py` says what it reads).

Kept apart from the learner's torch side so that a method option can pool it without torch.
"""

from __future__ import annotations

import math
from typing import Any


class PooledMean:
    """The mean of every value added over the run, and its standard error (s / √n)."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.squares = 0.0

    def add(self, value: float) -> None:
        if math.isfinite(value):
            self.count += 1
            self.total += value
            self.squares += value * value

    def estimate(self) -> tuple[float, float] | None:
        """(mean, its standard error), or None below three values."""
        n = self.count
        if n < 3:
            return None
        mean = self.total / n
        variance = max(self.squares - n * mean * mean, 0.0) / (n - 1)
        return mean, math.sqrt(variance / n)

    def state(self) -> dict[str, Any]:
        return {"count": self.count, "total": self.total, "squares": self.squares}

    def load_state(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])
        self.total = float(state["total"])
        self.squares = float(state["squares"])
