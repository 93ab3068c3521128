"""Replay that knows when to stop: move a method toward on-policy as replay stops paying.

Replay buys a fast start; late in a run its lead closes (docs/RESULTS.md: positive-biased replay
on spell_backward is 10 points ahead of on-policy early and level at on-policy's plateau, with half
its entropy), and what the late rounds' reuse buys is then small.
The compute-optimal replay ratio falls toward on-policy as staleness costs more (arXiv 2604.08706:
y* = μ / (ρ + 1/x)), and ReMix (arXiv 2507.06892) anneals off-policy reuse over training. This
option holds a replay scale s in [0, 1] and hands it to the method before every round
(`ReplayMethod.set_replay_scale`): at s = 1 the method replays as configured, at s = 0 it trains
on each fresh rollout once (for table methods y → 1 + s·(y − 1) with fresh-anchored batches, and
positive-biased replay's δ → s·δ).

Two modes:

- `schedule`, the baseline: s = 1 until the fraction `start` of the budget, then linearly to 0 at
  `end` (the run's progress, `RunSignals.progress`); `start = end = 1.0` never anneals (replay as
  configured, for the guard alone).
- `signals`, the controller: after `start` (and `window` rounds), every round in which the run's
  signals press toward on-policy multiplies s by (1 − `rate`), and s never rises again. A round
  presses when any of these holds:
  - *entropy*: the fresh rounds' entropy (behaviour-policy NLL of the sampled tokens, smoothed
    over rounds) is below `entropy_floor` × its starting value: replay is collapsing diversity;
  - *plateau*: the fresh reward's least-squares gain over the last `window` rounds is below
    `min_gain`: replay is no longer buying progress. With `plateau_z` > 0 the reading is a
    one-sided test: it presses only when the gain's upper bound, gain + `plateau_z` × its
    standard error (from the line's residuals), is below `min_gain`, so a run still gaining
    does not press on round-to-round noise (on chain_sum the fitted gain's noise, ±0.02 at 256
    rollouts a round, is twice the default `min_gain`);
  - *m2*: M2PO's second moment of the log importance ratio, over the stale rows (the trained
    batch's moment divided by its stale share), is above `m2_max` (M2PO, arXiv 2510.01161, keeps
    it under 0.04): the replayed rows are too far off-policy to help;
  - *clip*: the clipped-token fraction is above `clip_max` (off by default; only clipped losses
    report it).

In either mode, `guard` adds a test of whether replay still helps, on the evidence of the whole
run: the learner reads the cosine between the replayed rows' gradient and the fresh rows' on each
step that holds both (`algorithms/gradient_alignment.py`: to first order, whether replay's
direction raises the on-policy objective; in the sync loop a round's first step), and once their
mean over the run is credibly at or below `guard_min_cosine` (mean + `guard_z` batch-means
standard errors at or below it, after `guard_min_readings` readings), the scale is 0 for the rest
of the run: on-policy exactly, at the compute on-policy spends. The guard needs `enabled` (it
acts through the scale) and our learner (TRL, verl and the asynchronous runtimes refuse it).

`on_policy_batch_size` lets the gradient step follow the scale: `train.batch_size` rows while
replay runs as configured (s = 1), `on_policy_batch_size` once handed to on-policy (s = 0),
linear in s between (`TableReplay.set_step_rows`). Replay gains from more, smaller steps a round
than on-policy does (issue #53: eight steps a round while replaying led lcm for two thirds of the
budget, then four a round on-policy, on-policy's worst steps setting, flattened it), so each phase
can take its own. A trainer whose step is its own size (TRL, verl) refuses it.

`anneal/scale` (with `on_policy_batch_size`, `anneal/step_rows` too) and, per signal, how many
rounds it pressed (`anneal/pressed_<signal>`) go into the log, so a run says which signal did the
work; with the guard, `guard/value`, `guard/error`, `guard/readings` and `guard/off` (the round it
fell back at, or -1); `guard/value` is the pooled cosine. The output-layer gradient norm (DGG,
arXiv 2605.19425) is not among the signals: the learner reports the whole model's gradient norm
only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_replay.algorithms.replay_value import BLOCK, MIN_BLOCKS, PooledMean
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

SIGNALS = ("entropy", "plateau", "m2", "clip")
MODES = ("signals", "schedule")
OFF = 0.02  # a scale below this is 0: on-policy exactly, not a trickle of replay


STALE_MIN = 0.05
"""The drift reading needs at least this share of stale rows in the trained batches: below it the
log-ratio moment per stale row is the ratio of two vanishing numbers."""


@dataclass
class AnnealConfig(OptionConfig):
    mode: str = knob(
        "signals", "'signals' (the run's signals press toward on-policy) or 'schedule'"
    )
    start: float = knob(0.1, "budget fraction before which replay runs as configured")
    end: float = knob(0.6, "schedule: budget fraction at which replay is off (on-policy)")
    rate: float = knob(0.05, "signals: share of the replay scale given up per pressed round")
    window: int = knob(40, "signals: rounds over which the fresh reward's gain is fitted")
    entropy_floor: float = knob(0.5, "signals: fresh entropy below this × its start presses")
    min_gain: float = knob(0.01, "signals: fresh reward gain over the window below this presses")
    plateau_z: float = knob(
        0.0, "signals: press on the plateau only if gain + plateau_z × its std. error < min_gain"
    )
    m2_max: float = knob(0.04, "signals: log-ratio second moment on stale rows above this presses")
    clip_max: float | None = knob(None, "signals: clipped-token fraction above this presses")
    guard: bool = knob(
        False, "on-policy for the rest of the run once replay's gradient credibly stops helping"
    )
    guard_min_cosine: float = knob(
        0.0, "guard: replay's gradient must point with the fresh rows' by more than this cosine"
    )
    guard_z: float = knob(2.0, "guard: falls back when the mean + guard_z std. errors is below")
    guard_min_readings: int = knob(
        30, "guard: readings (about one a round) pooled before it may fall back"
    )
    on_policy_batch_size: int | None = knob(
        None,
        "rows a gradient step once handed to on-policy (scale 0), moving linearly from "
        "train.batch_size with the scale (None: train.batch_size throughout)",
    )

    def learner_readings(self) -> list[tuple[str, str | None, object]]:
        """In `signals` mode: the drift reading (on by default) and the clip reading (where
        `clip_max` is set); the entropy reading is the fresh rounds' behaviour NLL, not the
        learner's. With `guard`, in either mode: the replayed rows' gradient against the fresh
        rows'."""
        readings: list[tuple[str, str | None, object]] = []
        if self.mode == "signals":
            readings.append(("log_ratio_m2", None, self.m2_max))
            if self.clip_max is not None:
                readings.append(("clip_fraction", "clip_max", self.clip_max))
        if self.guard:
            readings.append(("replay_cosine", "guard", True))
        return readings

    def check(self) -> None:
        if self.mode not in MODES:
            raise MethodConfigError(f"mode = {self.mode!r}: expected one of {list(MODES)}")
        for name in ("start", "end", "rate", "entropy_floor"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise MethodConfigError(f"{name} = {value!r}: must be in [0, 1]")
        never = self.start == self.end == 1.0  # replay as configured the whole run (the guard's)
        if self.mode == "schedule" and self.end <= self.start and not never:
            raise MethodConfigError(
                f"end = {self.end!r}: must be above start = {self.start!r} (or both 1.0: never)"
            )
        integer("window", self.window, minimum=3, error=MethodConfigError)
        positive("min_gain", self.min_gain, zero_ok=True)
        positive("plateau_z", self.plateau_z, zero_ok=True)
        positive("m2_max", self.m2_max)
        if self.clip_max is not None:
            positive("clip_max", self.clip_max)
        if not isinstance(self.guard, bool):
            raise MethodConfigError(f"guard = {self.guard!r}: expected true or false")
        if not (isinstance(self.guard_min_cosine, int | float) and -1 <= self.guard_min_cosine < 1):
            raise MethodConfigError(
                f"guard_min_cosine = {self.guard_min_cosine!r}: must be in [-1, 1)"
            )
        positive("guard_z", self.guard_z, zero_ok=True)
        integer(
            "guard_min_readings",
            self.guard_min_readings,
            minimum=BLOCK * MIN_BLOCKS,
            error=MethodConfigError,
        )
        if self.on_policy_batch_size is not None:
            integer(
                "on_policy_batch_size",
                self.on_policy_batch_size,
                minimum=1,
                error=MethodConfigError,
            )
        if self.guard and not self.enabled:
            raise MethodConfigError(
                "guard = true: it falls back through the anneal's replay scale; set enabled = "
                "true too (mode 'schedule' with start = end = 1.0 replays as configured until "
                "the guard acts)"
            )


def reward_gain(rewards: list[float]) -> float:
    """The least-squares line through `rewards` (one per round), as its rise over the window."""
    return gain_and_error(rewards)[0]


def gain_and_error(rewards: list[float]) -> tuple[float, float]:
    """(the least-squares rise over the window, its standard error from the residuals; both 0
    below two rounds, the error 0 below three)."""
    y = np.asarray(rewards, dtype=np.float64)
    n = len(y)
    if n < 2:
        return 0.0, 0.0
    x = np.arange(n, dtype=np.float64) - (n - 1) / 2
    spread = float((x * x).sum())
    slope = float((x * (y - y.mean())).sum() / spread)
    if n < 3:
        return slope * (n - 1), 0.0
    residuals = y - y.mean() - slope * x
    error = math.sqrt(float((residuals**2).sum()) / (n - 2) / spread)
    return slope * (n - 1), error * (n - 1)


@register_option
class Anneal(MethodOption[AnnealConfig]):
    name = "anneal"
    description = (
        "Move replay toward on-policy by schedule, or when the run's signals say it stops paying."
    )
    paper = (
        "ReMix, arXiv 2507.06892; compute-optimal replay, arXiv 2604.08706; M2PO, arXiv 2510.01161"
    )
    Config = AnnealConfig
    sets_replay_scale = True

    def __init__(self, settings: OptionConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        self.scale = 1.0
        self.rewards: deque[float] = deque(maxlen=self.settings.window)
        self.entropy: float | None = None  # smoothed over rounds (half-life window / 2)
        self.pressed = dict.fromkeys(SIGNALS, 0)
        self.last = dict.fromkeys(SIGNALS, 0)
        self.value = PooledMean()
        self.fell_back = -1  # the round the guard fell back to on-policy at

    @classmethod
    def refusal(cls, method: type[ReplayMethod[Any]]) -> str | None:
        if not method.scales_replay:
            return "it has no replay scale to move toward on-policy"
        return None

    @classmethod
    def resizes_steps(cls, settings: OptionConfig) -> str | None:
        if getattr(settings, "on_policy_batch_size", None) is None:
            return None
        return "on_policy_batch_size"

    @classmethod
    def needs_progress(cls, settings: OptionConfig) -> bool:
        return getattr(settings, "mode", None) == "schedule"

    def step_rows(self) -> int:
        """Rows a gradient step at the current scale: `train.batch_size` at 1, the handover's
        `on_policy_batch_size` at 0, linear in the scale between (rounded to a row)."""
        replaying, handed = self.context.batch_size, self.settings.on_policy_batch_size
        if handed is None:
            return replaying
        return max(1, round(handed + self.scale * (replaying - handed)))

    def _apply(self) -> None:
        self.method.set_replay_scale(self.scale)
        if self.settings.on_policy_batch_size is not None:
            self.method.set_step_rows(self.step_rows())

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        signals = self.context.signals
        progress = signals.progress
        if self.settings.mode == "schedule":
            if progress is None:
                raise RuntimeError("anneal: mode 'schedule' needs the run's budget progress")
            s = self.settings
            if s.end <= s.start:  # start = end = 1: never
                self.scale = 1.0 if progress < s.end else 0.0
            else:
                self.scale = float(
                    min(1.0, max(0.0, 1.0 - (progress - s.start) / (s.end - s.start)))
                )
        else:
            self._observe_round()
            if self._past_start(progress):
                self._press()
        if self.settings.guard and self.fell_back < 0 and self._behind():
            self.fell_back = self.context.signals.rounds
        if self.scale < OFF or self.fell_back >= 0:
            self.scale = 0.0
        self._apply()
        return fresh

    def observe_step(self) -> None:
        """With the guard: the step's reading into the run's pooled value, while replaying (at
        scale 0 the rows that are not fresh are the round's carried rows, not replay)."""
        if not self.settings.guard or self.fell_back >= 0 or self.scale == 0.0:
            return
        step = self.context.signals.step
        cosine = step.get("replay_cosine")
        if cosine is not None and not step.get("gated"):  # DGG refused the step: not taken
            self.value.add(cosine)

    def _behind(self) -> bool:
        """The guard's test: the pooled cosine is credibly at or below `guard_min_cosine`."""
        s = self.settings
        estimate = self.value.estimate()
        if estimate is None or self.value.count < s.guard_min_readings:
            return False
        mean, error = estimate
        return mean + s.guard_z * error <= s.guard_min_cosine

    def _past_start(self, progress: float | None) -> bool:
        if len(self.rewards) < self.settings.window:
            return False
        return progress is None or progress >= self.settings.start

    def _observe_round(self) -> None:
        stats = self.context.signals.round
        if math.isfinite(stats.reward_mean):
            self.rewards.append(stats.reward_mean)
        if math.isfinite(stats.entropy):
            decay = 0.5 ** (2.0 / self.settings.window)
            self.entropy = (
                stats.entropy
                if self.entropy is None
                else decay * self.entropy + (1 - decay) * stats.entropy
            )

    def readings(self) -> dict[str, bool]:
        """Which signals press toward on-policy this round."""
        s, signals = self.settings, self.context.signals
        start = signals.first("round_entropy")
        entropy = (
            self.entropy is not None
            and start is not None
            and start > 0
            and self.entropy < s.entropy_floor * start
        )
        plateau = False
        if len(self.rewards) == s.window:
            gain, error = gain_and_error(list(self.rewards))
            plateau = gain + s.plateau_z * error < s.min_gain
        m2, stale = signals.mean("log_ratio_m2"), signals.mean("stale_fraction")
        drift = m2 is not None and stale is not None and stale > STALE_MIN and m2 / stale > s.m2_max
        clip = signals.mean("clip_fraction")
        clipped = s.clip_max is not None and clip is not None and clip > s.clip_max
        return {"entropy": entropy, "plateau": plateau, "m2": drift, "clip": clipped}

    def _press(self) -> None:
        readings = self.readings()
        self.last = {k: int(v) for k, v in readings.items()}
        for key, on in readings.items():
            self.pressed[key] += int(on)
        if any(readings.values()):
            self.scale *= 1.0 - self.settings.rate

    def metrics(self) -> dict[str, float]:
        out = {"anneal/scale": self.scale}
        if self.settings.on_policy_batch_size is not None:
            out["anneal/step_rows"] = float(self.step_rows())
        if self.settings.mode == "signals":
            out.update({f"anneal/pressed_{k}": float(v) for k, v in self.pressed.items()})
            if self.entropy is not None:
                out["anneal/entropy"] = self.entropy
            if len(self.rewards) >= 3:
                out["anneal/reward_gain"] = reward_gain(list(self.rewards))
        if self.settings.guard:
            out["guard/readings"] = float(self.value.count)
            out["guard/off"] = float(self.fell_back)
            estimate = self.value.estimate()
            if estimate is not None:
                out["guard/value"], out["guard/error"] = estimate
        return out

    def state(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "rewards": list(self.rewards),
            "entropy": self.entropy,
            "pressed": self.pressed,
            "last": self.last,
            "guard": self.value.state(),
            "fell_back": self.fell_back,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.scale = float(state["scale"])
        self.rewards = deque((float(r) for r in state["rewards"]), maxlen=self.settings.window)
        self.entropy = None if state["entropy"] is None else float(state["entropy"])
        self.pressed = {k: int(state["pressed"][k]) for k in SIGNALS}
        self.last = {k: int(state["last"][k]) for k in SIGNALS}
        if "guard" in state:  # absent before the guard (#53)
            self.value.load_state(state["guard"])
            self.fell_back = int(state["fell_back"])
        if self._method is not None:
            self._apply()
