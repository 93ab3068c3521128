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

Diversity is read against the same member (`member_diversity`): a tuned on-policy may buy its
speed with entropy (two gradient steps a round move the policy twice as far per rollout), so
"entropy kept" against plain on-policy's interval asks replay for more than the setting a user
would run gives; both readings are reported.

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
from llm_replay.experiments.suite_stats import PASS_KEY, kept, raised

DIVERSITY_COUNTED = ("entropy_kept_vs_member", "pass_kept_vs_member", "pass_raised_vs_member")
"""The `member_diversity` readings a suite counts across tasks (entropy raised is not counted)."""


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


def member_diversity(method: Mapping[str, Any], member: Mapping[str, Any]) -> dict[str, Any]:
    """A method's final entropy and pass@8 (its summary entry) against the tuned member's
    interval over seeds: kept (within or above it) and raised (above it); None where either was
    not measured."""
    return {
        "entropy_kept_vs_member": kept(method.get("entropy"), member.get("entropy")),
        "entropy_raised_vs_member": raised(method.get("entropy"), member.get("entropy")),
        "pass_kept_vs_member": kept(method.get(PASS_KEY), member.get(PASS_KEY)),
        "pass_raised_vs_member": raised(method.get(PASS_KEY), member.get(PASS_KEY)),
    }


def diversity_line(summary: Mapping[str, Any], basis: str) -> str | None:
    """A sentence under an experiment's table: each method's final entropy and pass@8 against
    the tuned member's interval (None without a tuned member or where it was not measured)."""
    reading = summary.get("envelope") or {}
    name = (reading.get("tuned_member") or {}).get("member", {}).get(basis)
    methods = summary["methods"]
    if name is None or name not in methods:
        return None
    groups: dict[str, list[str]] = {}
    for method, entry in methods.items():
        if method == name:
            continue
        d = member_diversity(entry, methods[name])
        if d["entropy_kept_vs_member"] is None or d["pass_kept_vs_member"] is None:
            continue
        entropy = member_word(d["entropy_kept_vs_member"], d["entropy_raised_vs_member"])
        passes = member_word(d["pass_kept_vs_member"], d["pass_raised_vs_member"])
        groups.setdefault(f"entropy {entropy}, {PASS_KEY} {passes}", []).append(method)
    if not groups:
        return None
    member = methods[name]
    parts = "; ".join(f"{what}: {', '.join(names)}" for what, names in groups.items())
    return (
        f"Diversity against the tuned member {name} (final entropy "
        f"{_spread_text(member['entropy'], '{:.3f}')}, {PASS_KEY} "
        f"{_spread_text(member[PASS_KEY], '{:.0%}')}, medians over its seeds with their 95% "
        f"intervals; raised is above the interval): {parts}."
    )


def member_word(kept_: bool | None, raised_: bool | None) -> str:
    """ "raised", "kept" or "below" (the member's interval), "—" where not measured."""
    return "—" if kept_ is None else "raised" if raised_ else "kept" if kept_ else "below"


def _spread_text(spread: Mapping[str, Any], form: str) -> str:
    interval = spread.get("ci95")
    bounds = "" if interval is None else f" [{form.format(interval[0])}–{form.format(interval[1])}]"
    return form.format(spread["median"]) + bounds
