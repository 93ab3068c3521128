"""The figures a suite reads across its tasks, shared by the plain reading (`suite.py`) and the
reading against tuned on-policy (`envelope.py`): the basis, the goal, the bootstrap of the median
across tasks over each task's seeds, and how a ratio, an interval and a share are written."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

BASIS = "mu_5"
PASS_KEY = "pass@8"
MEDIAN_RATIO_GOAL = 0.5
"""Issue #38's acceptance: the median compute ratio over the tasks the baseline gains on is at
most this."""
BOOTSTRAP_RESAMPLES = 9999
"""Resamples of the bootstrap over seeds behind the median's interval
(`median_across_uncertainty`)."""


def median_across_uncertainty(
    per_seed: Sequence[Sequence[float | None]],
    *,
    goal: float = MEDIAN_RATIO_GOAL,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any] | None:
    """How far the median across tasks would move with other seeds: a bootstrap that resamples
    each task's seeds (its per-seed ratios, "never reached" as +inf) with replacement, takes each
    task's median and then the median across tasks. Returns the 95% percentile interval (an
    infinite bound as None) and the share of resamples at or under `goal`: at three to five seeds
    a task, a median of 0.52× may be on either side of 0.5×, and this says how often. The set of
    tasks is held fixed, so it measures seed noise, not how another choice of tasks would read;
    the share is a bootstrap frequency, not the probability that the goal is met. None when no
    task has two seeds (nothing to resample)."""
    tasks = [np.array([np.inf if v is None else float(v) for v in s]) for s in per_seed]
    if any(np.isnan(t).any() for t in tasks):
        raise ValueError(f"per_seed = {per_seed!r}: a ratio is NaN (never reached is None)")
    tasks = [t for t in tasks if t.size]
    if not tasks or all(t.size < 2 for t in tasks):
        return None
    rng = np.random.default_rng(seed)
    medians = np.empty((resamples, len(tasks)))
    for j, values in enumerate(tasks):
        draws = rng.integers(0, values.size, size=(resamples, values.size))
        medians[:, j] = np.median(values[draws], axis=1)
    across = np.median(medians, axis=1)
    with np.errstate(invalid="ignore"):  # inf - inf where both neighbours are never-reached
        low, high = np.percentile(across, [2.5, 97.5])
    return {
        "ci95": [float(b) if np.isfinite(b) else None for b in (low, high)],
        "within_goal": float(np.mean(across <= goal)),
        "goal": goal,
    }


def ratio_text(value: float | None) -> str:
    if value is None:
        return "—"
    return "not reached" if math.isinf(value) else f"{value:.2f}×"


def interval_text(bounds: list[float | None] | None) -> str:
    """` [0.28–0.72×]`, ` [0.28×–not reached]` or ` [not reached]`; empty without an interval."""
    if bounds is None:
        return ""
    low, high = bounds
    if low is None:
        return " [not reached]"
    if high is None:
        return f" [{low:.2f}×–not reached]"
    return f" [{low:.2f}–{high:.2f}×]"


def share_text(value: float | None) -> str:
    """A share of resamples, never rounded to a certainty it is not."""
    if value is None:
        return "—"
    if 0 < value < 0.01:
        return "<1%"
    if 0.99 < value < 1:
        return ">99%"
    return f"{value:.0%}"


def median_of(spread: Any) -> float | None:
    """The median of a summary's spread (`analysis.spread`), or None."""
    return None if not isinstance(spread, dict) else spread.get("median")


def kept(value: Any, reference: Any) -> bool | None:
    """The method's median is within the reference's interval or above it (with one reference
    seed, at or above its value)."""
    median, low = median_of(value), None
    if isinstance(reference, dict):
        interval = reference.get("ci95")
        low = interval[0] if interval is not None else reference.get("median")
    if median is None or low is None or not (math.isfinite(median) and math.isfinite(low)):
        return None  # not measured (a run without eval/entropy logs NaN)
    return bool(median >= low)


def raised(value: Any, reference: Any) -> bool | None:
    """The method's median is above the reference's interval (with one reference seed, above its
    value): diversity raised, not only kept."""
    median, high = median_of(value), None
    if isinstance(reference, dict):
        interval = reference.get("ci95")
        high = interval[1] if interval is not None else reference.get("median")
    if median is None or high is None or not (math.isfinite(median) and math.isfinite(high)):
        return None
    return bool(median > high)
