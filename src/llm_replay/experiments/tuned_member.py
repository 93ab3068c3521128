"""On-policy tuned as a user tunes it: the one member of a baseline sweep a user would run.

The envelope (`envelope.py`) takes, seed by seed, the least compute over every member of the
sweep: an oracle that knows which setting will be luckiest on each seed. A user sweeps once,
picks one setting and runs it; the best of four noisy members on a seed is better than any one
member, so the envelope reads every method against a baseline no user has. This module reads
each method against the member a user would pick instead: the *tuned member*, the one whose
median over seeds of compute to the baseline's final accuracy is least (never reached counted
as infinite; a tie goes to the first listed, the baseline first). It is picked on the same seeds
it is read on, which still flatters it: a third reading, beside the envelope and plain
on-policy, not a replacement.

Seed by seed, a method's ratio is its compute to the target ÷ the tuned member's on the same
seed. Where the member never reaches the target on a seed, its whole run's compute stands in
(it needs at least that much), so the ratio is an upper bound, read against the method; where
neither reaches it, the seed counts as never.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llm_replay.experiments.analysis import (
    RunCurves,
    _ratio,
    _seed,
    median_interval,
    median_or_none,
)


def pick_member(
    by_seed: Mapping[str, Mapping[int, RunCurves]],
    level: Mapping[int, float],
    basis: str,
) -> str:
    """The member with the least median compute to `level` (per seed) on `basis`."""
    medians = {
        member: median_or_none([runs[s].reach(level[s], basis) for s in level])
        for member, runs in by_seed.items()
    }
    finite = {m: v for m, v in medians.items() if v is not None}
    if not finite:
        return next(iter(by_seed))  # none reaches on the median seed: the baseline
    return min(finite, key=finite.__getitem__)


def member_compute(run: RunCurves, level: float, basis: str) -> float:
    """The member's compute to `level`, or its whole run's where it never gets there."""
    reached = run.reach(level, basis)
    return float(run.compute(basis)[-1]) if reached is None else reached


def member_reading(
    by_seed: Mapping[str, Mapping[int, RunCurves]],
    level: Mapping[int, float],
    runs: Mapping[str, Sequence[RunCurves]],
    bases: Sequence[str],
) -> dict[str, Any]:
    """The tuned member on each basis and every method's paired ratios against it."""
    picked = {b: pick_member(by_seed, level, b) for b in bases}
    reference = {
        b: {s: member_compute(by_seed[picked[b]][s], level[s], b) for s in level} for b in bases
    }
    methods: dict[str, Any] = {}
    for name, curves in runs.items():
        seeds = [_seed(c, i) for i, c in enumerate(curves)]
        per_seed = {
            b: [
                _ratio(c.reach(level[s], b), reference[b][s])
                for c, s in zip(curves, seeds, strict=True)
            ]
            for b in bases
        }
        methods[name] = {
            "ratio": {b: median_or_none(per_seed[b]) for b in bases},
            "ratio_ci95": {b: median_interval(per_seed[b]) for b in bases},
            "ratio_per_seed": per_seed,
        }
    return {"member": picked, "methods": methods}


def member_digest(tuned: Mapping[str, Any], method: str, basis: str) -> dict[str, Any]:
    """One method's ratios against the tuned member on `basis`, for a suite's digest (empty
    where the reading has none)."""
    entry = tuned.get("methods", {}).get(method)
    if entry is None:
        return {}
    return {
        "member_ratio": entry["ratio"][basis],
        "member_ratio_ci95": entry["ratio_ci95"][basis],
        "member_ratio_per_seed": entry["ratio_per_seed"][basis],
    }
