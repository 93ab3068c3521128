"""Advantage estimators over groups of rollouts: pure numpy functions, one registry.

Advantages are computed once, when a group is generated (arXiv 2604.08706: "advantages are computed
when a rollout is generated, not when it is reused"), so they live with the rollout in the table.

| name | advantage of rollout i in a group with rewards R | source |
|---|---|---|
| `grpo` | (R_i - mean R) / (std R + eps) | DeepSeekMath (GRPO) |
| `dr_grpo` | R_i - mean R | Dr. GRPO |
| `rloo` | R_i - mean of the other rewards | RLOO |
| `optimal` | R_i - β₁ log mean exp(R/β₁), β₁ = 0.5 | A*-PO / OAPL (the optimal value of KL-regularised RL) |

`grpo` divides by the population standard deviation of the group (n in the denominator) plus
1e-6, the standardisation the GRPO paper writes. TRL divides by the sample one (n − 1) plus 1e-4,
so with 8 completions its advantages are 0.935× ours; under Adam a constant scale only changes the
ε term. We keep ours, and rows trained through the TRL integration keep the advantages TRL
computed at generation (except with adaptive rollouts, whose groups are assembled from stages).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
AdvantageFn = Callable[[F64], F64]


def grpo(rewards: F64, eps: float = 1e-6) -> F64:
    r = np.asarray(rewards, dtype=np.float64)
    return np.asarray((r - r.mean()) / (r.std() + eps), dtype=np.float64)


def dr_grpo(rewards: F64) -> F64:
    r = np.asarray(rewards, dtype=np.float64)
    return np.asarray(r - r.mean(), dtype=np.float64)


def rloo(rewards: F64) -> F64:
    r = np.asarray(rewards, dtype=np.float64)
    n = len(r)
    if n < 2:
        return np.zeros(n)
    return np.asarray(r - (r.sum() - r) / (n - 1), dtype=np.float64)


OPTIMAL_BETA = 0.5


def optimal(rewards: F64, beta: float = OPTIMAL_BETA) -> F64:
    """R_i − V̂*, V̂* = β log mean exp(R/β): the group's estimate of the optimal value of
    KL-regularised RL against the policy that sampled it (A*-PO, OAPL). It lies between the
    group's mean (β → ∞) and its best reward (β → 0), so every advantage sits below R − mean and
    a group's advantages sum to a negative number: the loss leans on pushing down what was
    sampled."""
    r = np.asarray(rewards, dtype=np.float64)
    if len(r) == 0:
        return r.copy()
    scaled = r / beta
    top = scaled.max()
    value = beta * (top + np.log(np.mean(np.exp(scaled - top))))
    return np.asarray(r - value, dtype=np.float64)


ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "optimal": optimal,
}


def get_advantage_fn(name: str) -> AdvantageFn:
    try:
        return ADVANTAGES[name]
    except KeyError:
        raise ValueError(f"advantage = {name!r}: expected one of {sorted(ADVANTAGES)}") from None


def group_advantages(
    rewards: F64, group_ids: npt.NDArray[np.int64], estimator: str = "grpo"
) -> F64:
    """Advantages for a flat batch, each rollout scored within its group."""
    fn = get_advantage_fn(estimator)
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.empty_like(rewards)
    groups = np.asarray(group_ids)
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    for members in np.split(order, bounds):
        if len(members):
            out[members] = fn(rewards[members])
    return out
