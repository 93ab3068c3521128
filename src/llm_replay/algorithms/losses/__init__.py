"""Policy losses: one registered class per module, one signature, aggregation apart.

| name            | per-token objective                                  | source                        |
|-----------------|------------------------------------------------------|-------------------------------|
| `reinforce`     | A·log π_θ (on-policy only: no correction)            | Williams 1992                 |
| `grpo`          | min(r·A, clip(r, 1−ε_low, 1+ε_high)·A), ε = 0.2/0.2   | Shao et al. 2024 (DeepSeekMath)|
| `dapo`          | as grpo with clip-higher ε = 0.2/0.28                | Yu et al. 2025 (DAPO)         |
| `decoupled_ppo` | w·min(u·A, clip(u)·A), u = π_θ/π_prox, w = sg(π_prox/π_behav) ≤ cap | Fu et al. 2025 (AReaL) |
| `tis`           | sg(min(r, C))·A·log π_θ, C = 2                       | Yao et al. 2025 (truncated IS)|
| `icepop`        | sg(r)·A·log π_θ where 1/β ≤ r ≤ β, else 0; β = 5     | Ling team 2025 (IcePop)       |
| `cispo`         | sg(clip(r, 1−ε_low, 1+ε_high))·A·log π_θ, ε = 1/0.28 | MiniMax-M1 2025               |
| `gspo`          | min(s·A, clip(s)·A), s = (π_θ(y)/π_behav(y))^(1/|y|), ε = 3e-4/4e-4 | Zheng et al. 2025 (GSPO) |
| `asymre`        | (A − δV)·log π_θ, δV = −0.1; expects A = R − V̂ (dr_grpo) | Arnal et al. 2025 (AsymRE) |
| `m2po`          | M·r·A, no clip; M masks the top (log r)² tokens      | Zheng et al. 2025 (M2PO)      |
| `exgrpo`        | fresh rows: grpo; replayed rows: f(r)·A, f(r) = r/(r+β), β = 0.1 | Zhan et al. 2025 (ExGRPO) |
| `bapo`          | grpo's surrogate, bounds raised until positives carry ρ₀ = 0.4 | Xi et al. 2025 (BAPO) |
| `oapl`          | (β·log(π_θ(y)/π_behav(y)) − A*)² per rollout, β = 1e-3, A* optimal | Ritter 2026 (OAPL) |

Each loss's module says the rest (`base.py` says what a loss is). `build_loss(name, **knobs)` makes
one; `policy_loss` applies it, weights rows and aggregates (`aggregation.py`); `describe_losses`
is what `llm-replay losses` prints.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from llm_replay.algorithms.token_control import BatchAnchor, TokenControl

from llm_replay.algorithms.losses.aggregation import AGGREGATIONS, aggregate, normalizer
from llm_replay.algorithms.losses.base import (
    LOSSES,
    ClipConfig,
    Loss,
    LossConfig,
    LossConfigError,
    LossInputs,
    register_loss,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def loss_class(name: str) -> type[Loss]:
    if name not in LOSSES:
        raise ValueError(f"loss = {name!r}: choose one of {sorted(LOSSES)}")
    return LOSSES[name]


def build_loss(name: str, **knobs: Any) -> Loss:
    """The registered loss `name` with these knobs (the rest at their defaults)."""
    cls = loss_class(name)
    own = {f.name for f in dataclasses.fields(cls.Config)}
    unknown = sorted(set(knobs) - own)
    if unknown:
        raise LossConfigError(
            f"{unknown[0]}: not a knob of loss {name!r} (its knobs: {sorted(own) or 'none'})"
        )
    return cls(cls.Config(**knobs))


def policy_loss(
    loss: Loss | str,
    logprobs: Tensor,
    behaviour_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    proximal_logprobs: Tensor | None = None,
    weights: Tensor | None = None,
    replayed: Tensor | None = None,
    aggregation: str = "token_mean",
    denominator: float | None = None,
    control: TokenControl | None = None,
    control_rows: Tensor | None = None,
    generator: Any = None,
    control_anchor: BatchAnchor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The scalar loss and its metrics (means over completion tokens).

    logprobs, behaviour_logprobs, proximal_logprobs, mask: [B, T]; advantages, weights: [B]
    (weights: per-rollout sampling weights, e.g. prioritized replay's importance weights);
    replayed: [B] bool, the rows a method drew from its table (read by `exgrpo`). A name is
    built with the loss's default knobs. `control` treats chosen tokens on top of the loss
    (`llm_replay.algorithms.token_control`: Clip-Cov, KL-Cov, a weight on replayed successes);
    control_rows [B] bool are the rows its `rows: replayed` means (default: `replayed`; the
    learner passes every reused row); `generator` seeds Clip-Cov's random pick;
    `control_anchor` centres and cuts its choice on a larger batch than these rows
    (`token_control.BatchAnchor`).
    """
    if isinstance(loss, str):
        loss = build_loss(loss)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation = {aggregation!r}: choose one of {AGGREGATIONS}")
    mask = mask.to(logprobs.dtype)
    inputs = LossInputs(logprobs, behaviour_logprobs, advantages, mask, proximal_logprobs, replayed)
    per_token, parts = loss(inputs)
    treated = None
    if control is not None and control.active:
        rows = control_rows if control_rows is not None else replayed
        if rows is None:
            rows = advantages.new_zeros(len(advantages)).bool()
        treated = control.select(logprobs, advantages, mask, rows, generator, control_anchor)
        per_token = control.apply(per_token, inputs.log_ratio, advantages, treated, rows)
    if weights is not None:
        per_token = per_token * weights[:, None]
    value = aggregate(per_token, mask, aggregation, denominator)
    metrics = {f"loss/{key}": v for key, v in loss_statistics(inputs, parts).items()}
    if treated is not None and control is not None and control.chooses_tokens:
        metrics["loss/cov_treated"] = float(treated.sum() / mask.sum().clamp(min=1))
    return value, metrics


def loss_statistics(inputs: LossInputs, parts: dict[str, Tensor]) -> dict[str, float]:
    """A loss's parts and the behaviour statistics a method reads (`methods.signals`), as means
    over the completion tokens: `ratio_max`, `kl_behaviour` (the k3 estimate of KL(behaviour ‖
    current)), `sampled_nll` and `log_ratio_m2` (M2PO's second moment). Every front end that
    runs our losses reports these under one set of names (ours: `loss/<name>`; verl's actor:
    `actor/llm_replay_<name>`)."""
    mask = inputs.mask
    n = mask.sum().clamp(min=1)
    out = {key: float((part.detach() * mask).sum() / n) for key, part in parts.items()}
    if "ratio" in parts:
        out["ratio_max"] = float((parts["ratio"].detach() * mask).max())
    log_ratio = inputs.log_ratio.detach().clamp(-20.0, 20.0)  # a floored token stays finite
    out["kl_behaviour"] = float((((-log_ratio).exp() - 1 + log_ratio) * mask).sum() / n)
    out["sampled_nll"] = float(-(inputs.logprobs.detach() * mask).sum() / n)
    out["log_ratio_m2"] = float((log_ratio.square() * mask).sum() / n)
    return out


@functools.cache
def loss_reports(name: str) -> frozenset[str]:
    """The statistics (`loss_statistics`' keys) the loss `name` reports in any front end that
    runs it, found by running it on two rows of three tokens: a loss that does not clip reports
    no clip fraction, so a trainer can tell which step signals it will have."""
    import torch  # torch-free at import: the config reads this package

    logprobs = torch.tensor([[-1.0, -0.5, -2.0], [-0.2, -1.5, -0.7]])  # [2, 3]
    inputs = LossInputs(
        logprobs,
        logprobs - 0.3,
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 3),
        proximal_logprobs=logprobs - 0.1,
        replayed=torch.tensor([False, True]),
    )
    _, parts = build_loss(name)(inputs)
    return frozenset(loss_statistics(inputs, parts))


def describe_losses() -> list[dict[str, Any]]:
    """Every registered loss with its paper and knobs (defaults and help), for the CLI."""
    out = []
    for name, cls in sorted(LOSSES.items()):
        knobs = [
            {"name": f.name, "default": f.default, "help": f.metadata.get("help", "")}
            for f in dataclasses.fields(cls.Config)
        ]
        out.append(
            {
                "name": name,
                "description": cls.description,
                "paper": cls.paper,
                "default_clip": list(cls.default_clip) if cls.default_clip else None,
                "needs_proximal": cls.needs_proximal,
                "advantage": cls.advantage,
                "trl": cls.trl_loss,
                "knobs": knobs,
            }
        )
    return out


__all__ = [
    "AGGREGATIONS",
    "LOSSES",
    "ClipConfig",
    "Loss",
    "LossConfig",
    "LossConfigError",
    "LossInputs",
    "aggregate",
    "build_loss",
    "describe_losses",
    "loss_class",
    "loss_reports",
    "loss_statistics",
    "normalizer",
    "policy_loss",
    "register_loss",
]
