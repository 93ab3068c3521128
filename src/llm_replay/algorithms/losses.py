"""Policy losses behind one signature, in one registry, with aggregation as a separate argument.

Every loss maps per-token inputs to a per-token loss (the negative of the objective to maximise);
`policy_loss` then applies per-rollout sampling weights and aggregates. Notation per token t of
rollout i: r = π_θ/π_behav, the ratio to the log-probs stored when the rollout was generated;
A_i the rollout's advantage (computed at generation, never recomputed on reuse); sg = stop-gradient.

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
| `m2po`          | M·r·A, no clip; M masks the top (log r)² tokens (below)  | Zheng et al. 2025 (M2PO)      |
| `exgrpo`        | fresh rows: grpo; replayed rows: f(r)·A, f(r) = r/(r+β), β = 0.1 | Zhan et al. 2025 (ExGRPO) |

`m2po` replaces the clip with a trust region on the second moment of the importance weights
(arXiv 2510.01161): tokens are masked, largest (log r)² first, until the mean (log r)² of the
tokens left is at most `m2_threshold`, so only extreme outliers lose their gradient. The mask is
computed over the tokens of one loss call (a micro-batch when the learner splits a batch).

`exgrpo` is ExGRPO's mixed-policy objective (arXiv 2510.02245, after LUFFY's policy shaping): the
rows a method marked as replayed (`Sample.sources > 0`) are trained on the shaped, unclipped ratio
f(r) = r/(r + β), whose gradient β/(r+β)² · r · ∇log π_θ amplifies low-probability tokens and damps
confident ones; fresh rows keep GRPO's clip. Without the mark every row is fresh.

`tis` and `icepop` take `level="sequence"`: the ratio is then the length-normalised sequence ratio
exp(mean_t log r) (GSPO's definition, so bands and caps mean the same at any length), shared by
every token of the rollout. `gspo`'s sequence loss is given to each of the rollout's tokens; use
`sequence_mean` aggregation to weight rollouts equally, as the paper does.

Aggregations: `token_mean` (Σ loss / Σ tokens), `sequence_mean` (mean over rollouts of each
rollout's token mean), `token_sum_norm` (Σ loss / (rollouts × a constant length), Dr. GRPO).
A `normalizer` computed over the whole batch makes micro-batched gradients sum to the batch's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

AGGREGATIONS = ("token_mean", "sequence_mean", "token_sum_norm")


@dataclass(frozen=True)
class LossParams:
    """Loss hyper-parameters; a `None` clip takes the loss's documented default."""

    clip_low: float | None = None
    clip_high: float | None = None
    tis_cap: float = 2.0
    icepop_beta: float = 5.0
    level: str = "token"
    decoupled_cap: float | None = None
    delta_v: float = -0.1
    m2_threshold: float = 0.04
    shaping_beta: float = 0.1

    def __post_init__(self) -> None:
        for name in ("clip_low", "clip_high", "decoupled_cap"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} = {value!r}: must be finite and >= 0")
        if not self.tis_cap > 0:
            raise ValueError(f"tis_cap = {self.tis_cap!r}: must be > 0")
        if not (math.isfinite(self.m2_threshold) and self.m2_threshold >= 0):
            raise ValueError(f"m2_threshold = {self.m2_threshold!r}: must be finite and >= 0")
        if not (math.isfinite(self.shaping_beta) and self.shaping_beta > 0):
            raise ValueError(f"shaping_beta = {self.shaping_beta!r}: must be finite and > 0")
        if not self.icepop_beta > 1:
            raise ValueError(f"icepop_beta = {self.icepop_beta!r}: must be > 1")
        if self.level not in ("token", "sequence"):
            raise ValueError(f"level = {self.level!r}: must be 'token' or 'sequence'")


@dataclass(frozen=True)
class LossInputs:
    """logprobs, behaviour_logprobs, proximal_logprobs: [B, T]; advantages [B]; mask [B, T] float;
    replayed [B] bool (rows a method drew from its table rather than the fresh round)."""

    logprobs: Tensor
    behaviour_logprobs: Tensor
    advantages: Tensor
    mask: Tensor
    proximal_logprobs: Tensor | None = None
    replayed: Tensor | None = None

    @property
    def log_ratio(self) -> Tensor:
        return (self.logprobs - self.behaviour_logprobs) * self.mask

    def sequence_log_ratio(self, log_ratio: Tensor) -> Tensor:
        """Length-normalised sequence log-ratio, broadcast to [B, T]."""
        lengths = self.mask.sum(-1).clamp(min=1)
        return ((log_ratio * self.mask).sum(-1) / lengths)[:, None].expand_as(self.mask)


LossFn = Callable[[LossInputs, LossParams], tuple[Tensor, dict[str, Tensor]]]
DEFAULT_CLIP: dict[str, tuple[float, float]] = {
    "grpo": (0.2, 0.2),
    "dapo": (0.2, 0.28),
    "decoupled_ppo": (0.2, 0.2),
    "cispo": (1.0, 0.28),
    "gspo": (3e-4, 4e-4),
    "exgrpo": (0.2, 0.2),
}


def _clip_range(name: str, params: LossParams) -> tuple[float, float]:
    low, high = DEFAULT_CLIP[name]
    low = params.clip_low if params.clip_low is not None else low
    high = params.clip_high if params.clip_high is not None else high
    return 1.0 - low, 1.0 + high


def _clipped(ratio: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic surrogate (to minimise) and where the clip was active."""
    unclipped = ratio * adv
    clipped = ratio.clamp(low, high) * adv
    return -torch.minimum(unclipped, clipped), (clipped < unclipped).float()


def _ppo(name: str) -> LossFn:
    def loss(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
        ratio = torch.exp(x.log_ratio)
        per_token, clipped = _clipped(ratio, x.advantages[:, None], *_clip_range(name, p))
        return per_token, {"ratio": ratio, "clip_fraction": clipped}

    loss.__doc__ = f"PPO clip against the behaviour log-probs ({name} default ε)."
    return loss


def reinforce(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    return -x.advantages[:, None] * x.logprobs, {}


def decoupled_ppo(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    if x.proximal_logprobs is None:
        raise ValueError("loss 'decoupled_ppo' needs proximal_logprobs")
    prox = x.proximal_logprobs.detach()
    u = torch.exp((x.logprobs - prox) * x.mask)
    w = torch.exp((prox - x.behaviour_logprobs) * x.mask)
    if p.decoupled_cap is not None:
        w = w.clamp(max=p.decoupled_cap)
    per_token, clipped = _clipped(u, x.advantages[:, None], *_clip_range("decoupled_ppo", p))
    return w * per_token, {"ratio": u, "clip_fraction": clipped, "behaviour_weight": w}


def _ratio_at_level(x: LossInputs, p: LossParams) -> Tensor:
    log_ratio = x.log_ratio.detach()
    return torch.exp(x.sequence_log_ratio(log_ratio) if p.level == "sequence" else log_ratio)


def tis(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    ratio = _ratio_at_level(x, p)
    weight = ratio.clamp(max=p.tis_cap)
    return -weight * x.advantages[:, None] * x.logprobs, {
        "ratio": ratio,
        "truncated_fraction": (ratio > p.tis_cap).float(),
    }


def icepop(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    ratio = _ratio_at_level(x, p)
    keep = ((ratio >= 1.0 / p.icepop_beta) & (ratio <= p.icepop_beta)).float()
    return -keep * ratio * x.advantages[:, None] * x.logprobs, {
        "ratio": ratio,
        "masked_fraction": 1.0 - keep,
    }


def cispo(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    ratio = torch.exp(x.log_ratio.detach())
    low, high = _clip_range("cispo", p)
    weight = ratio.clamp(low, high)
    return -weight * x.advantages[:, None] * x.logprobs, {
        "ratio": ratio,
        "clip_fraction": (weight != ratio).float(),
    }


def gspo(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    ratio = torch.exp(x.sequence_log_ratio(x.log_ratio))
    per_token, clipped = _clipped(ratio, x.advantages[:, None], *_clip_range("gspo", p))
    return per_token, {"ratio": ratio, "clip_fraction": clipped}


def asymre(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    return -(x.advantages[:, None] - p.delta_v) * x.logprobs, {}


def second_moment_mask(log_ratio: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """1 for the tokens M2PO keeps: drop the largest (log r)² first until the mean of the rest is
    at most `threshold` (a mean over fewer tokens after each drop; ties dropped in index order)."""
    squared = (log_ratio.detach() ** 2)[mask > 0]
    keep = torch.zeros_like(mask)
    if squared.numel() == 0:
        return keep
    ordered, order = torch.sort(squared, descending=True, stable=True)
    suffix = ordered.flip(0).cumsum(0).flip(0)  # sum of ordered[k:]
    suffix_mean = suffix / torch.arange(len(ordered), 0, -1, device=suffix.device)
    within = suffix_mean <= threshold
    dropped = int(within.to(torch.int64).argmax()) if bool(within.any()) else len(ordered)
    kept = torch.ones_like(ordered)
    kept[:dropped] = 0
    flat = torch.empty_like(ordered)
    flat[order] = kept
    keep[mask > 0] = flat
    return keep


def m2po(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    log_ratio = x.log_ratio
    ratio = torch.exp(log_ratio)
    keep = second_moment_mask(log_ratio, x.mask, p.m2_threshold)
    return -keep * ratio * x.advantages[:, None], {"ratio": ratio, "masked_fraction": 1.0 - keep}


def exgrpo(x: LossInputs, p: LossParams) -> tuple[Tensor, dict[str, Tensor]]:
    ratio = torch.exp(x.log_ratio)
    fresh, clipped = _clipped(ratio, x.advantages[:, None], *_clip_range("exgrpo", p))
    shaped = -(ratio / (ratio + p.shaping_beta)) * x.advantages[:, None]
    if x.replayed is None:
        replayed = torch.zeros_like(x.mask)
    else:
        replayed = x.replayed.to(x.mask.dtype)[:, None].expand_as(x.mask)
    per_token = torch.where(replayed > 0, shaped, fresh)
    return per_token, {
        "ratio": ratio,
        "clip_fraction": clipped * (1.0 - replayed),
        "shaped_fraction": replayed,
    }


LOSSES: dict[str, LossFn] = {
    "reinforce": reinforce,
    "grpo": _ppo("grpo"),
    "dapo": _ppo("dapo"),
    "decoupled_ppo": decoupled_ppo,
    "tis": tis,
    "icepop": icepop,
    "cispo": cispo,
    "gspo": gspo,
    "asymre": asymre,
    "m2po": m2po,
    "exgrpo": exgrpo,
}
NEEDS_PROXIMAL = frozenset({"decoupled_ppo"})


def normalizer(aggregation: str, mask: Tensor, sum_norm_length: int | None = None) -> float:
    """The denominator `aggregate` divides by, computed once over a whole batch."""
    if aggregation == "token_mean":
        return float(mask.sum().clamp(min=1))
    rows = float(mask.shape[0])
    if aggregation == "sequence_mean":
        return rows
    if aggregation == "token_sum_norm":
        return rows * float(sum_norm_length or mask.shape[1])
    raise ValueError(f"aggregation = {aggregation!r}: choose one of {AGGREGATIONS}")


def aggregate(
    per_token: Tensor, mask: Tensor, aggregation: str, denominator: float | None = None
) -> Tensor:
    """Reduce a [B, T] loss to a scalar; `denominator` defaults to this batch's `normalizer`."""
    denominator = denominator if denominator is not None else normalizer(aggregation, mask)
    if aggregation == "sequence_mean":
        per_row = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_row.sum() / denominator
    return (per_token * mask).sum() / denominator


def policy_loss(
    name: str,
    logprobs: Tensor,
    behaviour_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    proximal_logprobs: Tensor | None = None,
    weights: Tensor | None = None,
    replayed: Tensor | None = None,
    aggregation: str = "token_mean",
    params: LossParams | None = None,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The scalar loss of `LOSSES[name]` and its metrics (means over completion tokens).

    logprobs, behaviour_logprobs, proximal_logprobs, mask: [B, T]; advantages, weights: [B]
    (weights: per-rollout sampling weights, e.g. prioritized replay's importance weights);
    replayed: [B] bool, the rows a method drew from its table (read by `exgrpo`).
    """
    if name not in LOSSES:
        raise ValueError(f"loss = {name!r}: choose one of {sorted(LOSSES)}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation = {aggregation!r}: choose one of {AGGREGATIONS}")
    mask = mask.to(logprobs.dtype)
    inputs = LossInputs(logprobs, behaviour_logprobs, advantages, mask, proximal_logprobs, replayed)
    per_token, parts = LOSSES[name](inputs, params or LossParams())
    if weights is not None:
        per_token = per_token * weights[:, None]
    loss = aggregate(per_token, mask, aggregation, denominator)
    n = mask.sum().clamp(min=1)
    metrics = {
        f"loss/{key}": float((value.detach() * mask).sum() / n) for key, value in parts.items()
    }
    if "ratio" in parts:
        metrics["loss/ratio_max"] = float((parts["ratio"].detach() * mask).max())
    log_ratio = inputs.log_ratio.detach().clamp(-20.0, 20.0)  # a floored token stays finite
    metrics["loss/kl_behaviour"] = float(((torch.exp(-log_ratio) - 1 + log_ratio) * mask).sum() / n)
    metrics["loss/sampled_nll"] = float(-(logprobs.detach() * mask).sum() / n)
    metrics["loss/log_ratio_m2"] = float((log_ratio.square() * mask).sum() / n)  # M2PO's
    return loss, metrics
