"""The envelope along the compute axis: each member's median curve on a common grid, the best of
them at each point, and who is on top where (`envelope.py` reads the ratios; this module the
picture of who leads where, which the plots and the tables' notes draw)."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import RunCurves, on_grid

AXIS = "mu_5"
GRID_POINTS = 80


def median_curve(curves: Sequence[RunCurves], grid: np.ndarray, basis: str = AXIS) -> np.ndarray:
    """Smoothed accuracy, median over seeds at each grid point, NaN where no more than half the
    seeds reach (as `report._band` draws it)."""
    values = on_grid(curves, "accuracy", basis, grid)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        median = np.nanmedian(values, axis=0)
    median[2 * np.sum(~np.isnan(values), axis=0) <= len(curves)] = np.nan
    return np.asarray(median)


def axis_grid(runs: Mapping[str, Sequence[RunCurves]], basis: str = AXIS) -> np.ndarray:
    end = max(float(c.compute(basis)[-1]) for cs in runs.values() for c in cs)
    return np.linspace(end / GRID_POINTS, end, GRID_POINTS)


def on_top(
    members: Mapping[str, Sequence[RunCurves]], grid: np.ndarray
) -> tuple[np.ndarray, list[str | None]]:
    """The envelope (the highest member median) at each grid point and the member on top (None
    where no member has a median)."""
    names = list(members)
    medians = np.vstack([median_curve(members[m], grid) for m in names])  # [members, grid]
    covered = ~np.isnan(medians).all(axis=0)
    filled = np.where(np.isnan(medians), -np.inf, medians)
    top = np.argmax(filled, axis=0)  # the first of equals: the baseline first
    envelope = np.where(covered, filled.max(axis=0), np.nan)
    return envelope, [names[i] if ok else None for i, ok in zip(top, covered, strict=True)]


def leaders_on_axis(members: Mapping[str, Sequence[RunCurves]]) -> dict[str, Any]:
    """Along the μ = 5 axis: the grid, the envelope's accuracy and the member on top at each
    point; the runs of points one member leads (`segments`: member, from, to); the share of the
    points each member leads (`share`) and, in each quarter of the axis, the member that leads
    most of its points (`quarters`; the first listed of equals): where each member is best."""
    grid = axis_grid(members)
    envelope, leader = on_top(members, grid)
    segments: list[dict[str, Any]] = []
    previous: str | None = None
    for x, name in zip(grid, leader, strict=True):
        if name is not None and name == previous:
            segments[-1]["to"] = float(x)
        elif name is not None:  # a new leader, or the first after points with none
            segments.append({"member": name, "from": float(x), "to": float(x)})
        previous = name
    return {
        "basis": AXIS,
        "grid": [float(x) for x in grid],
        "envelope_accuracy": [None if math.isnan(v) else float(v) for v in envelope],
        "leader": leader,
        "segments": segments,
        "share": _shares(leader),
        "quarters": [
            _most(list(part)) for part in np.array_split(np.array(leader, dtype=object), 4)
        ],
    }


def _shares(leaders: Sequence[str | None]) -> dict[str, float]:
    known = [m for m in leaders if m is not None]
    return {m: n / len(known) for m, n in Counter(known).most_common()}


def _most(leaders: Sequence[str | None]) -> str | None:
    counts = Counter(m for m in leaders if m is not None)
    top = max(counts.values(), default=0)
    return next((m for m in dict.fromkeys(leaders) if m is not None and counts[m] == top), None)


def segments_text(reading: Mapping[str, Any]) -> str:
    """ "on_policy 55%, on_policy_lr2x 45%; by quarter: on_policy, on_policy_lr2x, …": the
    share of the axis each member leads, and who leads most of each quarter of it."""
    axis = reading["axis"]
    if not axis.get("share"):
        return "—"
    shares = ", ".join(f"{m} {share:.0%}" for m, share in axis["share"].items())
    quarters = ", ".join(m or "—" for m in axis["quarters"])
    return f"{shares}; by quarter: {quarters}"
