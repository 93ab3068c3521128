"""The output layer's gradient norm, and DGG's gate on it.

DGG (Dynamic Gradient Gating, arXiv 2605.19425): when rollouts are reused, the updates that hurt
concentrate at the output layer (`lm_head`), whose weight change surges with the collapse while
the intermediate layers stay still; its gradient norm lower-bounds the policy's divergence. So
the norm is a real-time signal of a harmful step, and a step whose norm surges is intercepted
before it reaches the optimizer.

`HeadGradient` measures the output layer's weight gradient from its use as the output layer
alone: our tiny models tie it to the input embedding, whose `.grad` then mixes both uses, so a
hook on the layer's forward collects (dL/dlogits)ᵀ·h over the micro-batches instead. `HeadGate`
admits a step unless, after `warmup` admitted steps, its norm exceeds `ratio` × the exponential
mean of the admitted steps' norms; a refused step leaves the weights and the optimizer's moments
as they were. The learner logs `loss/head_grad_norm` on every step and, with the gate on,
`loss/gated`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


class HeadGradient:
    """Within `with`: the summed weight gradient of `model`'s output layer as the output layer."""

    def __init__(self, model: Any) -> None:
        getter = getattr(model, "get_output_embeddings", None)
        self.head = getter() if getter is not None else None
        self.total: Tensor | None = None
        self._handle: Any = None

    @property
    def available(self) -> bool:
        return self.head is not None

    def __enter__(self) -> HeadGradient:
        self.total = None
        if self.head is not None:
            self._handle = self.head.register_forward_hook(self._forward)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _forward(self, module: Any, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        if not (torch.is_grad_enabled() and output.requires_grad):
            return  # a no-grad forward (the proximal policy) adds nothing
        hidden = inputs[0].detach()

        def collect(grad: Tensor) -> None:
            part = torch.einsum("...v,...d->vd", grad.float(), hidden.float())
            self.total = part if self.total is None else self.total + part

        output.register_hook(collect)  # type: ignore[no-untyped-call]

    def norm(self) -> float | None:
        return None if self.total is None else float(self.total.norm())


@dataclass
class HeadGate:
    """Admit a step unless its output-layer gradient norm surges (see the module docstring)."""

    ratio: float = 0.0  # 0: every step is admitted
    warmup: int = 10
    decay: float = 0.9
    reference: float = 0.0
    admitted: int = 0
    gated: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ratio) and (self.ratio == 0 or self.ratio > 1)):
            raise ValueError(f"head_gate = {self.ratio!r}: must be 0 (off) or above 1")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 1:
            raise ValueError(f"head_gate_warmup = {self.warmup!r}: must be an integer >= 1")

    @property
    def active(self) -> bool:
        return self.ratio > 0

    def admit(self, norm: float) -> bool:
        if not self.active:
            return True
        if self.admitted >= self.warmup and not norm <= self.ratio * self.reference:
            self.gated += 1
            return False
        self.reference = (
            norm if self.admitted == 0 else self.decay * self.reference + (1 - self.decay) * norm
        )
        self.admitted += 1
        return True

    def state(self) -> dict[str, Any]:
        return {"reference": self.reference, "admitted": self.admitted, "gated": self.gated}

    def load_state(self, state: dict[str, Any]) -> None:
        self.reference = float(state["reference"])
        self.admitted = int(state["admitted"])
        self.gated = int(state["gated"])
