"""Replay that measures whether it pays: a two-armed bandit between replay and on-policy rounds,
judged on the fresh reward each arm's compute buys.

Replay's saving is a property of the task (issue #38): `auto`, tuned on two tasks, trails
on-policy GRPO from its first evaluations on a task it never saw, and nothing in it notices. This
option notices. Every round it either replays as the method is configured (replay scale 1) or
trains on that round's fresh rollouts once (scale 0: fresh-anchored, on-policy exactly; see
`ReplayMethod.set_replay_scale`), chosen at random with probability `p` of replaying. It charges
each round's compute to the arm that ran it, on the μ cost basis the project measures with
(`mu` × completion tokens generated + completion tokens trained), and fits over the last
`window` rounds

    fresh reward_t = a + b_replay · C_replay(t) + b_on · C_on(t) + noise,

where C_arm(t) is the compute spent in that arm before round t: b_arm is the fresh reward that a
unit of compute spent that way buys, the quantity replay is meant to improve. The difference
d = b_replay − b_on and its standard error come from the least-squares fit, and `p` is the
posterior probability that replay buys more, Φ(d / SE) (Thompson sampling with a flat prior),
kept within [`p_min`, 1 − `p_min`] so that either arm is still probed. So where replay pays the
run replays most rounds; where it does not, the run falls back to on-policy on its own, early or
late, and it needs neither the run's length nor a tuned schedule (unlike `replay.anneal`'s
schedule). During the first `warmup` rounds `p` is ½.

The compute is measured, not assumed: a replay round costs its extra training (y = 2 trains
twice the tokens) and must buy more reward for it. A round's reward reflects everything trained
before it, and both arms advance the same policy, so the two slopes are told apart only by how
the arms interleave; the random choice each round is what keeps the two regressors apart.
`bandit/p_replay`, `bandit/advantage` (d / SE) and `bandit/arm` go into the log. The arm draws
come from a generator seeded by `seed` and the round, so a resumed run draws what an
uninterrupted one does.

Related: ReMix (arXiv 2507.06892) anneals off-policy reuse on a schedule; compute-optimal replay
(arXiv 2604.08706) chooses the ratio from μ and a staleness model; AR3PO (arXiv 2509.25808)
allocates generation where it teaches. This option measures the payoff online instead.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_replay.checks import integer
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfigError,
    MethodContext,
    MethodOption,
    OptionConfig,
    ReplayMethod,
    knob,
    positive,
)
from llm_replay.methods.registry import register_option

REPLAY, ON_POLICY = 1, 0


@dataclass
class BanditConfig(OptionConfig):
    window: int = knob(60, "rounds over which each arm's reward per unit compute is fitted")
    warmup: int = knob(12, "rounds at the start that replay with probability 1/2")
    p_min: float = knob(0.1, "the least probability of either arm, so both stay measured")
    mu: float = knob(5.0, "the cost basis: a generated token costs mu trained tokens")
    seed: int = knob(0, "seeds the arm draws (with the round number)")

    def check(self) -> None:
        for name, low in (("window", 6), ("warmup", 0)):
            integer(name, getattr(self, name), minimum=low, error=MethodConfigError)
        if self.warmup > self.window:
            raise MethodConfigError(
                f"warmup = {self.warmup!r}: must be at most window = {self.window!r}"
            )
        if not (isinstance(self.p_min, int | float) and 0.0 <= self.p_min <= 0.5):
            raise MethodConfigError(f"p_min = {self.p_min!r}: must be in [0, 0.5]")
        positive("mu", self.mu, zero_ok=True)
        integer("seed", self.seed, error=MethodConfigError)


def arm_slopes(
    rewards: list[float], replay_cost: list[float], on_cost: list[float]
) -> tuple[float, float, float] | None:
    """Least squares of reward on an intercept and each arm's cumulative compute: (b_replay,
    b_on, the standard error of b_replay − b_on), or None when the fit is not determined (fewer
    than four rounds, or the arms' compute not told apart)."""
    y = np.asarray(rewards, dtype=np.float64)
    n = len(y)
    if n < 4:
        return None
    x = np.column_stack([np.ones(n), replay_cost, on_cost]).astype(np.float64)
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    gram = xs.T @ xs
    if np.linalg.cond(gram) > 1e12:
        return None
    inverse = np.linalg.inv(gram)
    beta = inverse @ xs.T @ y
    residuals = y - xs @ beta
    variance = float(residuals @ residuals) / (n - 3)
    contrast = np.array([0.0, 1.0 / scale[1], -1.0 / scale[2]])
    coefficients = beta / scale
    # d = b_replay − b_on in original units: contrast · beta (beta in scaled units)
    d_variance = float(contrast @ inverse @ contrast) * variance
    return float(coefficients[1]), float(coefficients[2]), math.sqrt(max(d_variance, 0.0))


def replay_probability(slopes: tuple[float, float, float] | None, p_min: float) -> float:
    """Φ((b_replay − b_on) / SE) within [p_min, 1 − p_min]; ½ while the fit is undetermined."""
    if slopes is None:
        return 0.5
    b_replay, b_on, error = slopes
    d = b_replay - b_on
    if error <= 0:
        p = 0.5 if d == 0 else float(d > 0)
    else:
        p = 0.5 * (1.0 + math.erf(d / error / math.sqrt(2.0)))
    return float(min(1.0 - p_min, max(p_min, p)))


@register_option
class Bandit(MethodOption[BanditConfig]):
    name = "bandit"
    description = (
        "Replay or train on-policy each round at random, leaning to the arm whose compute buys "
        "more fresh reward (falls back to on-policy on its own where replay does not pay)."
    )
    paper = "issue #38; ReMix, arXiv 2507.06892; compute-optimal replay, arXiv 2604.08706"
    Config = BanditConfig
    sets_replay_scale = True

    def __init__(self, settings: OptionConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        window = self.settings.window
        self.rewards: deque[float] = deque(maxlen=window)
        self.replay_cost: deque[float] = deque(maxlen=window)
        self.on_cost: deque[float] = deque(maxlen=window)
        self.spent = [0.0, 0.0]  # cumulative compute by arm: [on-policy, replay]
        self.arm: int | None = None  # the arm of the round under way
        self.generated = 0.0  # the round under way's generated completion tokens
        self.trained_before = 0.0  # signals.trained_tokens when that round began
        self.rounds = 0
        self.p_replay = 0.5
        self.slopes: tuple[float, float, float] | None = None

    @classmethod
    def refusal(cls, method: type[ReplayMethod[Any]]) -> str | None:
        if not method.scales_replay:
            return "it has no replay scale to switch to on-policy"
        return None

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        signals = self.context.signals
        if self.arm is not None:  # charge the finished round to its arm
            trained = signals.trained_tokens - self.trained_before
            self.spent[self.arm] += self.settings.mu * self.generated + trained
        reward = float(fresh.rewards.mean()) if len(fresh) else math.nan
        if math.isfinite(reward):
            self.rewards.append(reward)
            self.on_cost.append(self.spent[ON_POLICY])
            self.replay_cost.append(self.spent[REPLAY])
        self.slopes = arm_slopes(list(self.rewards), list(self.replay_cost), list(self.on_cost))
        if self.rounds < self.settings.warmup:
            self.p_replay = 0.5
        else:
            self.p_replay = replay_probability(self.slopes, self.settings.p_min)
        draw = np.random.default_rng([self.settings.seed, self.rounds]).random()
        self.arm = REPLAY if draw < self.p_replay else ON_POLICY
        self.generated = float(fresh.completion_lengths.sum()) if len(fresh) else 0.0
        self.trained_before = signals.trained_tokens
        self.rounds += 1
        self.method.set_replay_scale(float(self.arm))
        return fresh

    def metrics(self) -> dict[str, float]:
        out = {"bandit/p_replay": self.p_replay, "bandit/arm": float(self.arm or 0)}
        if self.slopes is not None:
            b_replay, b_on, error = self.slopes
            out["bandit/advantage"] = (b_replay - b_on) / error if error > 0 else 0.0
            out["bandit/gain_replay"] = b_replay
            out["bandit/gain_on_policy"] = b_on
        out["bandit/compute_replay"] = self.spent[REPLAY]
        out["bandit/compute_on_policy"] = self.spent[ON_POLICY]
        return out

    def state(self) -> dict[str, Any]:
        return {
            "rewards": list(self.rewards),
            "replay_cost": list(self.replay_cost),
            "on_cost": list(self.on_cost),
            "spent": self.spent,
            "arm": self.arm,
            "generated": self.generated,
            "trained_before": self.trained_before,
            "rounds": self.rounds,
            "p_replay": self.p_replay,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        window = self.settings.window
        self.rewards = deque((float(v) for v in state["rewards"]), maxlen=window)
        self.replay_cost = deque((float(v) for v in state["replay_cost"]), maxlen=window)
        self.on_cost = deque((float(v) for v in state["on_cost"]), maxlen=window)
        self.spent = [float(v) for v in state["spent"]]
        self.arm = None if state["arm"] is None else int(state["arm"])
        self.generated = float(state["generated"])
        self.trained_before = float(state["trained_before"])
        self.rounds = int(state["rounds"])
        self.p_replay = float(state["p_replay"])
        self.slopes = arm_slopes(list(self.rewards), list(self.replay_cost), list(self.on_cost))
        if self._method is not None and self.arm is not None:
            self._method.set_replay_scale(float(self.arm))
