"""The output layer's gradient norm, and DGG's gate on it.

DGG (Dynamic Gradient Gating, arXiv 2605.19425): when rollouts are reused, the updates that hurt
concentrate at the output layer (`lm_head`), whose weight change surges with the collapse while
the intermediate layers stay still; its gradient norm lower-bounds the policy's divergence. So
the norm is a real-time signal of a harmful step, and a step whose norm surges is intercepted
before it reaches the optimizer.

`HeadGradient` measures the output layer's weight gradient from its use as the output layer
alone: our tiny models tie it to the input embedding, whose `.grad` then mixes both uses, so a
hook on the layer's forward collects (dL/dlogits)ᵀ·h over the micro-batches instead. It costs a
vocabulary × hidden accumulator, so the learner only measures it with the gate on
(`algorithm.head_gate`); the gate itself (`head_gate.HeadGate`) needs no torch.
"""

from __future__ import annotations

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
