"""The replay-gradient reading pooled over a run (`gradient_alignment.py` says what it reads).

Consecutive readings are not independent: they come from nearly the same weights and a table
that mostly holds the same rows, so s / √n would understate the error. `PooledMean` uses batch
means instead: the readings in blocks of `block` consecutive values, and the standard error from
the spread of the block means, which holds while the correlation dies out within a block. Kept
apart from the learner's torch side so that a method option can pool it without torch.
"""

from __future__ import annotations

import math
from typing import Any

BLOCK = 10
MIN_BLOCKS = 3


class PooledMean:
    """The mean of every value added over the run, and its batch-means standard error."""

    def __init__(self, block: int = BLOCK) -> None:
        if block < 1:
            raise ValueError(f"block = {block!r}: must be at least 1")
        self.block = block
        self.count = 0
        self.total = 0.0
        self.open = [0, 0.0]  # the block being filled: values, sum
        self.blocks = [0, 0.0, 0.0]  # closed blocks: count, Σ mean, Σ mean²

    def add(self, value: float) -> None:
        if not math.isfinite(value):
            return
        self.count += 1
        self.total += value
        self.open[0] += 1
        self.open[1] += value
        if self.open[0] == self.block:
            mean = self.open[1] / self.block
            self.blocks[0] += 1
            self.blocks[1] += mean
            self.blocks[2] += mean * mean
            self.open = [0, 0.0]

    def estimate(self) -> tuple[float, float] | None:
        """(the mean of every value, its standard error from the block means), or None below
        `MIN_BLOCKS` closed blocks."""
        n, total, squares = self.blocks
        n = int(n)
        if n < MIN_BLOCKS:
            return None
        centre = total / n
        variance = max(squares - n * centre * centre, 0.0) / (n - 1)
        return self.total / self.count, math.sqrt(variance / n)

    def state(self) -> dict[str, Any]:
        return {
            "block": self.block,
            "count": self.count,
            "total": self.total,
            "open": list(self.open),
            "blocks": list(self.blocks),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.block = int(state["block"])
        self.count = int(state["count"])
        self.total = float(state["total"])
        self.open = [int(state["open"][0]), float(state["open"][1])]
        self.blocks = [
            int(state["blocks"][0]),
            float(state["blocks"][1]),
            float(state["blocks"][2]),
        ]
