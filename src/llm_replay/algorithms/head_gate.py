"""DGG's gate (arXiv 2605.19425): refuse a step whose output-layer gradient norm surges.

Harmful updates from reused rollouts concentrate at the output layer, whose gradient norm surges
with the policy's divergence (`gradient_gate.HeadGradient` measures it). `HeadGate` admits a step
unless, after `warmup` steps, its norm exceeds `ratio` × the exponential mean of the norms before
it. Every finite non-zero norm enters that mean, refused ones included, so a spike is refused but
a lasting shift is absorbed within about 1 / (1 − decay) steps instead of refusing the rest of the
run. A non-finite norm is always refused and leaves the mean alone; a zero norm (a batch whose
groups all tie) is admitted and leaves it alone too. No torch here: the config checks it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llm_replay.checks import integer


@dataclass
class HeadGate:
    """Admit a step unless its output-layer gradient norm surges (see the module docstring)."""

    ratio: float = 0.0  # 0: every step is admitted
    warmup: int = 10
    decay: float = 0.9
    reference: float = 0.0
    seen: int = 0  # finite non-zero norms that entered the reference
    gated: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ratio) and (self.ratio == 0 or self.ratio > 1)):
            raise ValueError(f"head_gate = {self.ratio!r}: must be 0 (off) or above 1")
        integer("head_gate_warmup", self.warmup, minimum=1)

    @property
    def active(self) -> bool:
        return self.ratio > 0

    def admit(self, norm: float) -> bool:
        if not self.active:
            return True
        if not math.isfinite(norm):
            self.gated += 1
            return False
        if norm == 0:
            return True
        surge = self.seen >= self.warmup and norm > self.ratio * self.reference
        self.reference = (
            norm if self.seen == 0 else self.decay * self.reference + (1 - self.decay) * norm
        )
        self.seen += 1
        self.gated += int(surge)
        return not surge

    def state(self) -> dict[str, Any]:
        return {"reference": self.reference, "seen": self.seen, "gated": self.gated}

    def load_state(self, state: dict[str, Any]) -> None:
        try:
            self.reference = float(state["reference"])
            self.seen = int(state["seen"])
            self.gated = int(state["gated"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"head gate state: unreadable ({error!r})") from None
