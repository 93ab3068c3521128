"""How much a per-seed ratio can say: each bracketed by its evaluations' own resolution.

A method's ratio on a seed (`envelope.py`) is its compute to a target accuracy ÷ the envelope's,
each read at the first evaluation whose smoothed accuracy is at or above the target. Two things
limit what that says, and on a task whose target sits on a plateau they are all it says:

- **cadence**: a run that reaches the target at an evaluation crossed it somewhere after the
  evaluation before, so its compute is known to one evaluation interval;
- **accuracy noise**: the smoothed accuracy is a mean of `SMOOTH` greedy evaluations of `n`
  problems, with binomial standard error δ = √(p(1 − p) / (n · SMOOTH)) at the target p. A run
  that ends 0.1 points under the target on a plateau has not reached it, by chance alone. n is
  the split's effective number of distinct problems (`eval/distinct`; where a log predates it,
  the experiment's split rebuilt by `compare.summarise`), not its rows: greedy decoding answers
  a repeated prompt the same way, and on the suite's lcm 500 rows are 27 effective problems.

So each seed's ratio gets a bracket. The target is what the envelope reached: its crossing is
known to its cadence, after the evaluation before its first at or above target (the least over
its members). The method's crossing is credited with its own noise as well: its *earliest*
credible reach is the compute at the evaluation before its first at or above target − δ (0
where that is its first evaluation, infinite where it never gets there); its *latest* is its
compute at the first evaluation at or above target + δ (infinite where it never gets there).
Then

- low = the method's earliest ÷ the envelope's reach, high = the method's latest ÷ the
  envelope's evaluation before its reach;
- a seed is **worse** when low > 1 (the method needs more compute however its noise fell and
  wherever in the interval each crossed), **better** when high < 1, and **unresolved**
  otherwise: its ratio, however far from 1, is within what these evaluations tell apart.

A method that never credibly reaches the target (never at target − δ) is worse. A log with
neither, and no split to rebuild, gets δ = 0: only the cadence brackets its ratios. The bracket is
one standard error wide each way, not a confidence interval: "worse" is the claim it can back.
In the summary an infinite bound is written as null.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import SMOOTH, RunCurves, _seed

VERDICTS = ("better", "unresolved", "worse")
FEW_PROBLEMS = 100  # under this many effective problems a smoothed accuracy moves by > 2.8 points


def accuracy_error(level: float, problems: float) -> float:
    """One standard error of a smoothed accuracy near `level` over `problems` per evaluation."""
    if not problems > 0:
        raise ValueError(f"problems = {problems!r}: an evaluation needs at least one problem")
    p = min(max(level, 0.0), 1.0)
    return math.sqrt(p * (1.0 - p) / (problems * SMOOTH))


def reach_window(run: RunCurves, level: float, error: float, basis: str) -> tuple[float, float]:
    """(earliest, latest) credible compute to `level` on `basis` (the module docstring)."""
    x = run.compute(basis)
    smoothed = run.smoothed
    low = np.flatnonzero(smoothed >= level - error - 1e-12)
    high = np.flatnonzero(smoothed >= level + error - 1e-12)
    earliest = math.inf if not low.size else (0.0 if low[0] == 0 else float(x[low[0] - 1]))
    latest = float(x[high[0]]) if high.size else math.inf
    return earliest, latest


def envelope_window(members: Sequence[RunCurves], level: float, basis: str) -> tuple[float, float]:
    """The envelope's (evaluation before its reach, its reach) of `level`: the least over its
    members' runs of one seed, the target taken as they measured it (no accuracy error)."""
    windows = [reach_window(run, level, 0.0, basis) for run in members]
    return min(w[0] for w in windows), min(w[1] for w in windows)


def bracket(method: tuple[float, float], envelope: tuple[float, float]) -> tuple[float, float]:
    """(low, high) of a seed's ratio from the method's reach window and the envelope's."""
    earliest, latest = method
    env_earliest, env_latest = envelope
    if math.isinf(earliest):
        low = math.inf
    elif earliest == 0.0 or math.isinf(env_latest):
        low = 0.0
    else:
        low = earliest / env_latest if env_latest > 0 else math.inf
    if env_earliest <= 0 or math.isinf(env_earliest) or math.isinf(latest):
        high = math.inf
    else:
        high = latest / env_earliest
    return low, max(low, high)


def verdict(low: float, high: float) -> str:
    if low > 1.0:
        return "worse"
    if high < 1.0:
        return "better"
    return "unresolved"


def resolution_reading(
    by_seed: Mapping[str, Mapping[int, RunCurves]],
    level: Mapping[int, float],
    runs: Mapping[str, Sequence[RunCurves]],
    bases: Sequence[str],
    distinct: float | None = None,
) -> dict[str, Any]:
    """Every method's per-seed bracket and verdict against the envelope of `by_seed`'s members
    on the target `level` (per seed), on each of `bases`; `distinct`: the eval split's effective
    number of problems where the logs do not say (`evaluation.distinct_problems`)."""
    first = next(iter(by_seed.values()))
    problems = {s: _problems(first[s], distinct) for s in level}
    error = {s: _error(level[s], problems[s]) for s in level}
    envelope = {
        b: {s: envelope_window([r[s] for r in by_seed.values()], level[s], b) for s in level}
        for b in bases
    }
    methods: dict[str, Any] = {}
    for name, curves in runs.items():
        seeds = [_seed(c, i) for i, c in enumerate(curves)]
        brackets = {
            b: [
                bracket(reach_window(c, level[s], error[s], b), envelope[b][s])
                for c, s in zip(curves, seeds, strict=True)
            ]
            for b in bases
        }
        verdicts = {b: [verdict(*pair) for pair in brackets[b]] for b in bases}
        methods[name] = {
            "bracket_per_seed": {
                b: [[_finite(lo), _finite(hi)] for lo, hi in brackets[b]] for b in bases
            },
            "verdict_per_seed": verdicts,
            "worse_seeds": {b: verdicts[b].count("worse") for b in bases},
        }
    return {
        "error_per_seed": [error[s] for s in sorted(level)],
        "problems_per_seed": [problems[s] for s in sorted(level)],
        "methods": methods,
    }


def _problems(run: RunCurves, distinct: float | None) -> float | None:
    """Effective problems per evaluation: the run's own `eval/distinct`, else `distinct` (the
    split's, from the experiment), else `eval/size` (rows; an overstatement where prompts
    repeat), else None."""
    logged = _least(run, "eval/distinct")
    if logged is not None:
        return logged
    return distinct if distinct is not None else _least(run, "eval/size")


def _least(run: RunCurves, key: str) -> float | None:
    values = run.metric(key)
    values = values[np.isfinite(values)]
    return float(values.min()) if values.size else None


def _error(level: float, problems: float | None) -> float:
    return 0.0 if problems is None else accuracy_error(level, problems)


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else float(value)


def resolution_digest(resolution: Mapping[str, Any], method: str, basis: str) -> dict[str, Any]:
    """One method's brackets and verdicts on `basis`, for a suite's digest (empty where the
    reading has none)."""
    entry = resolution.get("methods", {}).get(method)
    if entry is None:
        return {}
    return {
        "bracket_per_seed": entry["bracket_per_seed"][basis],
        "verdict_per_seed": entry["verdict_per_seed"][basis],
        "resolved_worse_seeds": entry["worse_seeds"][basis],
    }


def bracket_text(pair: Sequence[float | None]) -> str:
    """ "0.52–1.9×" (an infinite bound as ∞)."""
    low, high = ("∞" if v is None else f"{v:.2f}" for v in pair)
    return f"{low}–{high}×"


def note_line(reading: Mapping[str, Any], basis: str) -> str | None:
    """A sentence per experiment: each method's verdicts against the envelope, per seed."""
    resolution = reading.get("resolution")
    if not resolution:
        return None
    parts = []
    for method, entry in resolution["methods"].items():
        if method == reading["baseline"]:
            continue
        cells = ", ".join(
            f"{s}: {v} ({bracket_text(pair)})"
            for s, v, pair in zip(
                reading["methods"][method]["seed_ids"],
                entry["verdict_per_seed"][basis],
                entry["bracket_per_seed"][basis],
                strict=True,
            )
        )
        parts.append(f"{method}: {cells}")
    errors = ", ".join(f"{100 * e:.1f}" for e in resolution["error_per_seed"])
    return (
        "Each seed's ratio to the envelope bracketed by the evaluations' resolution (one "
        f"evaluation interval; the smoothed accuracy's standard error, {errors} points per seed; "
        "`experiments/resolution.py`): " + "; ".join(parts) + "."
    )


def suite_resolution(reading: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per method read against a sweep, the seeds resolved worse than the envelope across a
    suite's tasks ("lcm/2")."""
    out: dict[str, list[str]] = {}
    for method, entry in reading["methods"].items():
        read = [
            (task, r["vs_tuned"])
            for task, r in entry["tasks"].items()
            if "verdict_per_seed" in r.get("vs_tuned", {})
        ]
        if read:
            out[method] = [
                f"{task}/{seed}"
                for task, v in read
                for seed, call in zip(v["seed_ids"], v["verdict_per_seed"], strict=True)
                if call == "worse"
            ]
    return out


def suite_lines(reading: Mapping[str, Any]) -> list[str]:
    """The suite's Markdown: per method and task, how many seeds are worse, unresolved, better
    than the envelope once each ratio is bracketed by its evaluations' resolution."""
    rows = []
    for method, entry in reading["methods"].items():
        for task, r in entry["tasks"].items():
            v = r.get("vs_tuned", {})
            if "verdict_per_seed" not in v or r.get("no_gain"):
                continue
            counts = " / ".join(str(v["verdict_per_seed"].count(k)) for k in VERDICTS)
            cells = ", ".join(
                f"{s}: {bracket_text(p)}"
                for s, p in zip(v["seed_ids"], v["bracket_per_seed"], strict=True)
            )
            rows.append(f"| {method} | {task} | {counts} | {cells} |")
    if not rows:
        return []
    return [
        "",
        "Each seed's ratio to the envelope bracketed by its evaluations' resolution (one "
        "evaluation interval, one standard error of the smoothed accuracy; "
        "`experiments/resolution.py`): a seed is worse only when its bracket lies above 1×. "
        + problems_sentence(reading),
        "",
        "| method | task | seeds better / unresolved / worse | bracket per seed |",
        "|---|---|---|---|",
        *rows,
    ]


def problems_sentence(reading: Mapping[str, Any]) -> str:
    """ "Effective eval problems: gcd 275, products 33 (few: ...)." from a suite's digests."""
    counts = {
        task: min(p for p in r["envelope"]["eval_problems"] if p is not None)
        for task, r in reading["tasks"].items()
        if any(p is not None for p in (r.get("envelope") or {}).get("eval_problems") or ())
    }
    if not counts:
        return ""
    few = [t for t, n in counts.items() if n < FEW_PROBLEMS]
    text = "Effective eval problems: " + ", ".join(f"{t} {n:.0f}" for t, n in counts.items())
    if few:
        text += (
            f" ({', '.join(few)}: under {FEW_PROBLEMS}, so one standard error of the smoothed "
            "accuracy is several points and most of their seeds cannot be told apart)"
        )
    return text + "."
