"""Whether a method ends above the best tuned on-policy, seed by seed (issue #53).

Compute to on-policy's final accuracy (`envelope.py`) says how soon a method gets to where
on-policy ends. On a task where every on-policy setting climbs early to one level and stays there,
that ratio reads about 1× for anything that gets there as fast, whatever it does afterwards: on the
suite's binary_alternation all six one-knob settings end within a point of 47% on every seed and
the tuned envelope is there within a quarter of the budget, while a replay seed that ends 19 points
higher reads 1.99× because it crossed 47% one evaluation later. The question a user asks of such a
task is the other one: at the same compute, does the method end above the best of the sweep?

Per seed s, at the envelope's final compute on the μ = 5 axis (the most any member of s spent):

- the method's accuracy there: its smoothed accuracy (`analysis.SMOOTH`) at its last evaluation
  within `COMPUTE_SLACK` of that compute, so a run continued past the budget is read where the
  members stopped;
- its *gap*: that accuracy minus the highest smoothed final accuracy of any member on s, in points
  (the best member's own gap is 0, every member's at most 0);
- the gap's standard error √(δ_method² + δ_best²), each δ the smoothed accuracy's standard error at
  its level over the eval split's effective problems (`resolution.accuracy_error`, the resolution
  reading's problem count);
- **above** when the gap exceeds `CREDIBLE` standard errors, **below** when it is under minus that,
  **level** otherwise; with no problem count (a log with neither `eval/distinct` nor `eval/size`)
  no verdict, only the gap.

Two standard errors, not the one the ratio brackets use, because "ends above the best tuned
on-policy" is a claim a user acts on; and the three evaluations a smoothed accuracy averages are of
the same problems, so the error's n · SMOOTH overstates their independence, which the wider margin
partly makes up for.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import RunCurves, _seed
from llm_replay.experiments.envelope_axis import AXIS
from llm_replay.experiments.resolution import accuracy_error

CREDIBLE = 2.0
"""Standard errors of the gap beyond which a seed ends above (or below) the best member."""
COMPUTE_SLACK = 1.02
"""A method's evaluation counts as at the envelope's final compute up to this multiple of it
(budgets end a round past the mark, and rounds differ by method)."""
VERDICTS = ("above", "level", "below")


def accuracy_at(run: RunCurves, compute: float, basis: str = AXIS) -> float:
    """Smoothed accuracy at the last evaluation within `COMPUTE_SLACK` × `compute` (the first
    evaluation where even that one is later)."""
    x = run.compute(basis)
    within = np.flatnonzero(x <= compute * COMPUTE_SLACK)
    return float(run.smoothed[within[-1] if within.size else 0])


def gap_reading(
    by_seed: Mapping[str, Mapping[int, RunCurves]],
    runs: Mapping[str, Sequence[RunCurves]],
    problems: Mapping[int, float | None],
) -> dict[str, Any]:
    """Every method of `runs` against the best final of `by_seed`'s members on each seed
    (the module docstring); `problems`: each seed's effective eval problems, or None."""
    seeds = sorted(problems)
    best: dict[int, tuple[str, float]] = {}
    end: dict[int, float] = {}
    for s in seeds:
        finals = {m: float(runs_of[s].smoothed[-1]) for m, runs_of in by_seed.items()}
        leader = max(finals, key=finals.__getitem__)
        best[s] = (leader, finals[leader])
        end[s] = max(float(runs_of[s].compute(AXIS)[-1]) for runs_of in by_seed.values())
    methods: dict[str, Any] = {}
    for name, curves in runs.items():
        ids = [_seed(c, i) for i, c in enumerate(curves)]
        gaps, errors, verdicts = [], [], []
        for curve, s in zip(curves, ids, strict=True):
            if s not in best:
                raise ValueError(f"{name}: seed {s} has no member run to read its final against")
            accuracy, top = accuracy_at(curve, end[s]), best[s][1]
            error = _gap_error(accuracy, top, problems[s])
            gap = 100.0 * (accuracy - top)
            gaps.append(gap)
            errors.append(None if error is None else 100.0 * error)
            verdicts.append(None if error is None else verdict(gap, 100.0 * error))
        methods[name] = {
            "seed_ids": ids,
            "gap_per_seed": gaps,
            "error_per_seed": errors,
            "verdict_per_seed": verdicts,
            "median_gap": statistics.median(gaps),
        }
    return {
        "basis": AXIS,
        "members": list(by_seed),
        "best_member_per_seed": [best[s][0] for s in seeds],
        "best_final_per_seed": [best[s][1] for s in seeds],
        "at_compute_per_seed": [end[s] for s in seeds],
        "methods": methods,
    }


def _gap_error(accuracy: float, top: float, problems: float | None) -> float | None:
    if problems is None:
        return None
    return math.hypot(accuracy_error(accuracy, problems), accuracy_error(top, problems))


def verdict(gap: float, error: float) -> str:
    """`above`, `below` or `level`: a gap against `CREDIBLE` × its standard error (same units)."""
    if gap > CREDIBLE * error:
        return "above"
    if gap < -CREDIBLE * error:
        return "below"
    return "level"


def gap_digest(reading: Mapping[str, Any], method: str) -> dict[str, Any]:
    """One method's gaps for a suite's per-task digest (empty where the reading has none: a
    summary written before it)."""
    entry = (reading.get("final_gap") or {}).get("methods", {}).get(method)
    if entry is None:
        return {}
    return {
        "final_gap": entry["median_gap"],
        "final_gap_per_seed": entry["gap_per_seed"],
        "final_gap_error_per_seed": entry["error_per_seed"],
        "final_gap_verdict_per_seed": entry["verdict_per_seed"],
    }


def across(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over a method's tasks (their `vs_tuned` digests): seeds above, level and below the best
    tuned final, and the tasks where most seeds end above (empty where none was read)."""
    read = [r for r in rows if "final_gap" in r]
    calls = [c for r in read for c in r["final_gap_verdict_per_seed"]]
    if not read or any(c is None for c in calls):
        return {}
    return {
        "final_gap_seeds": {k: calls.count(k) for k in VERDICTS},
        "final_gap_tasks_above": sum(
            2 * list(r["final_gap_verdict_per_seed"]).count("above") > len(r["seed_ids"])
            for r in read
        ),
        "final_gap_tasks": len(read),
    }


def counts(verdicts: Sequence[str | None]) -> str:
    """ "3 / 2 / 0": seeds above / level / below ("—" where no verdict was given)."""
    if any(v is None for v in verdicts):
        return "—"
    return " / ".join(str(list(verdicts).count(k)) for k in VERDICTS)


def _seed_cell(seed: int, gap: float, call: str | None) -> str:
    return f"{seed}: {gap:+.1f}" + ("" if call is None else f" ({call})")


def note_line(reading: Mapping[str, Any]) -> str | None:
    """A sentence per experiment: each method's final against the best member's, per seed."""
    gap = reading.get("final_gap")
    if not gap:
        return None
    members = set(reading.get("members") or ())
    parts = []
    for method, entry in gap["methods"].items():
        if method in members:
            continue
        cells = ", ".join(
            _seed_cell(s, g, v)
            for s, g, v in zip(
                entry["seed_ids"], entry["gap_per_seed"], entry["verdict_per_seed"], strict=True
            )
        )
        parts.append(f"{method} {entry['median_gap']:+.1f} ({cells})")
    if not parts:
        return None
    return (
        "Final accuracy against the best member's on each seed, at the envelope's final compute "
        f"(points; above or below beyond {CREDIBLE:g} standard errors of the gap, "
        "`experiments/final_gap.py`): " + "; ".join(parts) + "."
    )


def suite_lines(reading: Mapping[str, Any]) -> list[str]:
    """The suite's Markdown: per method and task, the gap to the best tuned final, per seed, and
    across tasks how many seeds end above, level and below."""
    rows, totals = [], []
    for method, entry in reading["methods"].items():
        calls: list[str | None] = []
        for task, r in entry["tasks"].items():
            v = r.get("vs_tuned", {})
            if "final_gap" not in v:
                continue
            calls += v["final_gap_verdict_per_seed"]
            cells = ", ".join(
                _seed_cell(s, g, c)
                for s, g, c in zip(
                    v["seed_ids"],
                    v["final_gap_per_seed"],
                    v["final_gap_verdict_per_seed"],
                    strict=True,
                )
            )
            rows.append(
                f"| {method} | {task} | {v['final_gap']:+.1f} | "
                f"{counts(v['final_gap_verdict_per_seed'])} | {cells} |"
            )
        if calls:
            totals.append(f"{method} {counts(calls)}")
    if not rows:
        return []
    return [
        "",
        "Final accuracy against the best tuned on-policy: each seed's smoothed accuracy at the "
        "envelope's final compute minus the highest final of any member on that seed, in points; "
        f"above or below beyond {CREDIBLE:g} standard errors of the gap "
        "(`experiments/final_gap.py`). Seeds above / level / below over every task: "
        + "; ".join(totals)
        + ".",
        "",
        "| method | task | median gap (points) | seeds above / level / below | gap per seed |",
        "|---|---|---|---|---|",
        *rows,
    ]


def plot_gaps(
    readings: Mapping[str, Mapping[str, Any]],
    methods: Sequence[str],
    path: Path,
    *,
    title: str,
    styles: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path | None:
    """One figure, tasks along x: each seed's gap to the best member's final (points) for each of
    `methods`, with bars of ±`CREDIBLE` standard errors, beside the other members' gaps in grey;
    `readings`: task → its `final_gap` reading. None when no task has any of `methods`."""
    from llm_replay.experiments.plot_style import pyplot

    tasks = [t for t, r in readings.items() if any(m in r["methods"] for m in methods)]
    if not tasks:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(
        figsize=(min(16.0, max(6.0, 0.8 * len(tasks) * (len(methods) + 1))), 5.0)
    )
    width = 0.8 / (len(methods) + 1)
    labelled: set[str] = set()
    for i, task in enumerate(tasks):
        entries = readings[task]["methods"]
        for name in readings[task].get("members", ()):
            if name in entries:
                gaps = entries[name]["gap_per_seed"]
                ax.scatter([i - 0.4 + width / 2] * len(gaps), gaps, s=9, color="0.6", zorder=2)
        for j, name in enumerate(methods):
            if name not in entries:
                continue
            x = i - 0.4 + width * (j + 1.5)
            gaps, errors = entries[name]["gap_per_seed"], entries[name]["error_per_seed"]
            spread = np.linspace(-width / 4, width / 4, len(gaps)) if len(gaps) > 1 else [0.0]
            colour = (styles or {}).get(name, {}).get("color", f"C{j}")
            bars = [CREDIBLE * e if e is not None else 0.0 for e in errors]
            ax.errorbar(
                [x + d for d in spread],
                gaps,
                yerr=bars,
                fmt="o",
                color=colour,
                markersize=4,
                elinewidth=0.8,
                capsize=2,
                label=None if name in labelled else name,
                zorder=3,
            )
            labelled.add(name)
    ax.scatter([], [], s=9, color="0.6", label="the sweep's other settings")
    ax.axhline(0.0, color="black", linewidth=1.0)
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels(tasks, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("final accuracy − the best setting's (points)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
