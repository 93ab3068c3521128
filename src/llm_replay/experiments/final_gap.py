"""Whether a method ends above the best tuned on-policy, seed by seed (issue #53).

Compute to on-policy's final accuracy (`envelope.py`) says how soon a method gets to where
on-policy ends. On a task where on-policy climbs early to one level and stays there, that ratio
reads about 1× for anything that gets there as fast, whatever it does afterwards: on the suite's
binary_alternation the best of six one-knob settings ends at 46.8–47.1% on every seed and the
tuned envelope is there by the third evaluation, while a replay seed that ends 19 points higher
reads 1.99× because it crossed 47% one evaluation later. The question a user asks of such a task
is the other one: at the same compute, does the method end above the best of the sweep?

Per seed s, at the envelope's final compute on the μ = 5 axis (the most any member of s spent):

- the method's accuracy there: its smoothed accuracy (`analysis.SMOOTH`) at its last evaluation
  within `COMPUTE_SLACK` of that compute, so a run continued past the budget is read where the
  members stopped. A run that stopped short of the members' compute (its last evaluation under
  it ÷ `COMPUTE_SLACK`) is read at its end but gets no verdict, and one with no evaluation that
  early is not read;
- its *gap*: that accuracy minus the highest smoothed final accuracy of any member on s, in points
  (the best member's own gap is 0, every member's at most 0);
- the gap's standard error over another draw of the eval split's n effective problems (the
  resolution reading's count). Where both runs logged each row's verdict (`CORRECT_ROWS`) at
  every evaluation their smoothed accuracies average, it is *paired*: both runs answered the
  same problems, so each row's smoothed score is differenced, d, and the error is the
  row-weighted spread of d over n problems, √(var(d) / (n − 1)); a problem both runs get right
  (or both wrong) adds nothing to it. Otherwise, read as two independent accuracies:
  √(δ_method² + δ_best²), each δ = √(p(1 − p) / n) at its level p. Neither is n · SMOOTH, as the
  ratio brackets use: the evaluations a smoothed accuracy averages are of the same problems, and
  on a plateau they answer nearly alike;
- **above** when the gap exceeds `CREDIBLE` standard errors, **below** when it is under minus that,
  **level** otherwise; with no problem count (a log with neither `eval/distinct` nor `eval/size`)
  no verdict, only the gap;
- the same against the member *chosen on the other seeds* (`chosen_*`): the member with the
  highest mean final over every other seed, read on s. That is the setting a user would have
  tuned on pilot runs, and its final on s carries no selection on s's own noise, where the best
  of several finals on s is biased upward by it (below).

What the verdict can and cannot say. It covers the evaluations' noise, not seed-to-seed training
variance (the seeds themselves show that). Unpaired (logs from before the row verdicts), it is
conservative both ways: the two accuracies are read as independent although both runs answered
the same problems (`paired_per_seed` says which seeds were read paired, and
`unpaired_error_per_seed` keeps the unpaired error beside the paired one). It leans
against the method in another: the best member's final is the highest of several on that seed,
biased upward by the noise that picked it (the winner's curse), so an "above" is conservative,
while a "below" may be partly the curse's (plain on-policy, a member, ends 3–4 points under the
best member on every spell_backward seed, level on each). The member chosen on the other seeds
has no such bias on s; it may be a worse pick than s's best, which is the cost a user pays too.
The sweep's members are listed (`members`) and left out of a suite's counts.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import SMOOTH, RunCurves, _seed
from llm_replay.experiments.envelope_axis import AXIS
from llm_replay.experiments.resolution import accuracy_error
from llm_replay.metrics.logging import CORRECT_ROWS

CREDIBLE = 2.0
"""Standard errors of the gap beyond which a seed ends above (or below) the best member."""
COMPUTE_SLACK = 1.02
"""A method's evaluation counts as at the envelope's final compute up to this multiple of it
(budgets end a round past the mark, and rounds differ by method)."""
VERDICTS = ("above", "level", "below")


def read_index(run: RunCurves, compute: float, basis: str = AXIS) -> int | None:
    """The last evaluation within `COMPUTE_SLACK` × `compute`; None when even the first is
    later."""
    within = np.flatnonzero(run.compute(basis) <= compute * COMPUTE_SLACK)
    return int(within[-1]) if within.size else None


def accuracy_at(run: RunCurves, compute: float, basis: str = AXIS) -> tuple[float, float] | None:
    """(smoothed accuracy, its compute) at `read_index`; None when even the first evaluation is
    later."""
    i = read_index(run, compute, basis)
    if i is None:
        return None
    return float(run.smoothed[i]), float(run.compute(basis)[i])


def row_scores(run: RunCurves, index: int) -> np.ndarray | None:
    """Each eval row's smoothed score at evaluation `index`: its verdicts averaged over the
    evaluations `RunCurves.smoothed` averages there (their mean is the smoothed accuracy). None
    unless every one of them logged `CORRECT_ROWS`, over the same number of rows."""
    window = run.records[max(0, index - SMOOTH + 1) : index + 1]
    rows = [r.get(CORRECT_ROWS) for r in window]
    texts = [x for x in rows if isinstance(x, str) and x]
    if len(texts) != len(rows) or len({len(x) for x in texts}) != 1:
        return None
    verdicts = [np.frombuffer(x.encode("ascii"), dtype=np.uint8) == ord("1") for x in texts]
    scores: np.ndarray = np.stack(verdicts).mean(axis=0)
    return scores


def paired_error(method: np.ndarray, best: np.ndarray, problems: float) -> float | None:
    """The gap's standard error in points from two runs' `row_scores` on the same rows: the
    row-weighted variance of their difference over `problems` effective problems,
    √(var(d) / (problems − 1)). None when the rows differ in number or `problems` ≤ 1."""
    if method.shape != best.shape or problems <= 1:
        return None
    return 100.0 * math.sqrt(float(np.var(method - best)) / (problems - 1))


def accuracy_spread(level: float, problems: float) -> float:
    """One standard error of an accuracy near `level` over another draw of `problems` problems
    (`resolution.accuracy_error` without the credit for smoothing over evaluations)."""
    return accuracy_error(level, problems) * math.sqrt(SMOOTH)


@dataclass(frozen=True)
class _Reference:
    """A run's smoothed accuracy at one evaluation and its row scores there: a member's final
    read as the bar on one seed, or a method's reading against it."""

    member: str
    final: float
    rows: np.ndarray | None

    @classmethod
    def of(cls, member: str, run: RunCurves) -> _Reference:
        return cls(member, float(run.smoothed[-1]), row_scores(run, len(run.records) - 1))


def gap_reading(
    by_seed: Mapping[str, Mapping[int, RunCurves]],
    runs: Mapping[str, Sequence[RunCurves]],
    problems: Mapping[int, float | None],
) -> dict[str, Any]:
    """Every method of `runs` against the best final of `by_seed`'s members on each seed, and
    against the member chosen on the other seeds (the module docstring); `problems`: each seed's
    effective eval problems, or None. Gaps and errors in points, accuracies in fractions."""
    seeds = sorted(problems)
    best: dict[int, _Reference] = {}
    chosen: dict[int, _Reference | None] = {}
    end: dict[int, float] = {}
    for s in seeds:
        finals = {m: float(runs_of[s].smoothed[-1]) for m, runs_of in by_seed.items()}
        leader = max(finals, key=finals.__getitem__)
        best[s] = _Reference.of(leader, by_seed[leader][s])
        chosen[s] = _chosen_elsewhere(by_seed, s, [t for t in seeds if t != s])
        end[s] = max(float(runs_of[s].compute(AXIS)[-1]) for runs_of in by_seed.values())
    methods: dict[str, Any] = {}
    for name, curves in runs.items():
        ids = [_seed(c, i) for i, c in enumerate(curves)]
        entry: dict[str, list[Any]] = {k: [] for k in (*_READ_KEYS, *_CHOSEN_KEYS)}
        for curve, s in zip(curves, ids, strict=True):
            if s not in best:
                raise ValueError(f"{name}: seed {s} has no member run to read its final against")
            index = read_index(curve, end[s])
            if index is None:
                read = elsewhere = _UNREAD
                at = None
            else:
                at = float(curve.compute(AXIS)[index])
                mine = _Reference(name, float(curve.smoothed[index]), row_scores(curve, index))
                reached = at * COMPUTE_SLACK >= end[s]
                read = _against(mine, best[s], problems[s], reached)
                other = chosen[s]
                elsewhere = _against(mine, other, problems[s], reached) if other else _UNREAD
            values = (*read, at, *elsewhere[:3])
            for key, value in zip(entry, values, strict=True):
                entry[key].append(value)
        read_gaps = [g for g in entry["gap_per_seed"] if g is not None]
        methods[name] = {
            "seed_ids": ids,
            **entry,
            "median_gap": statistics.median(read_gaps) if read_gaps else None,
        }
    return {
        "basis": AXIS,
        "members": list(by_seed),
        "best_member_per_seed": [best[s].member for s in seeds],
        "best_final_per_seed": [best[s].final for s in seeds],
        "chosen_member_per_seed": [_name(chosen[s]) for s in seeds],
        "at_compute_per_seed": [end[s] for s in seeds],
        "methods": methods,
    }


_READ_KEYS = (
    "gap_per_seed",
    "error_per_seed",
    "verdict_per_seed",
    "paired_per_seed",
    "unpaired_error_per_seed",
    "read_at_per_seed",
)
_CHOSEN_KEYS = ("chosen_gap_per_seed", "chosen_error_per_seed", "chosen_verdict_per_seed")


def _name(reference: _Reference | None) -> str | None:
    return None if reference is None else reference.member


def _chosen_elsewhere(
    by_seed: Mapping[str, Mapping[int, RunCurves]], seed: int, others: Sequence[int]
) -> _Reference | None:
    """The member with the highest mean final over `others` (the setting a user would have
    tuned on those seeds), read on `seed`; None with no other seed."""
    if not others:
        return None
    means = {
        m: statistics.fmean(float(runs_of[t].smoothed[-1]) for t in others)
        for m, runs_of in by_seed.items()
    }
    pick = max(means, key=means.__getitem__)
    return _Reference.of(pick, by_seed[pick][seed])


_Read = tuple[float | None, float | None, str | None, bool, float | None]
_UNREAD: _Read = (None, None, None, False, None)


def _against(mine: _Reference, bar: _Reference, problems: float | None, reached: bool) -> _Read:
    """(gap, its error, verdict, paired?, unpaired error) of a run's smoothed accuracy `mine`
    against `bar`'s final; the error paired where both logged their rows, a verdict only where
    the run `reached` the members' compute."""
    gap = 100.0 * (mine.final - bar.final)
    error = unpaired = _gap_error(mine.final, bar.final, problems)
    paired = False
    if mine.rows is not None and bar.rows is not None and problems is not None:
        error_paired = paired_error(mine.rows, bar.rows, problems)
        if error_paired is not None:
            error, paired = error_paired, True
    call = verdict(gap, error) if error is not None and reached else None
    return gap, error, call, paired, unpaired


def _gap_error(accuracy: float, top: float, problems: float | None) -> float | None:
    """The gap's standard error in points (None without a problem count)."""
    if problems is None:
        return None
    return 100.0 * math.hypot(accuracy_spread(accuracy, problems), accuracy_spread(top, problems))


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
        "final_gap_paired_per_seed": entry.get("paired_per_seed", [False] * len(entry["seed_ids"])),
        "final_gap_chosen_per_seed": entry.get("chosen_gap_per_seed"),
        "final_gap_chosen_verdict_per_seed": entry.get("chosen_verdict_per_seed"),
    }


def across(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over a method's tasks (their `vs_tuned` digests, the sweep's members left out by the
    caller): seeds above, level and below the best tuned final, the seeds without a verdict,
    and the tasks where most seeds end above (empty where no task was read)."""
    read = [r for r in rows if "final_gap" in r]
    if not read:
        return {}
    calls = [c for r in read for c in r["final_gap_verdict_per_seed"]]
    chosen = [c for r in read for c in r.get("final_gap_chosen_verdict_per_seed") or ()]
    return {
        "final_gap_seeds": {k: calls.count(k) for k in VERDICTS},
        "final_gap_chosen_seeds": {k: chosen.count(k) for k in VERDICTS},
        "final_gap_seeds_without_verdict": calls.count(None),
        "final_gap_tasks_above": sum(
            2 * list(r["final_gap_verdict_per_seed"]).count("above") > len(r["seed_ids"])
            for r in read
        ),
        "final_gap_tasks": len(read),
    }


def counts(verdicts: Sequence[str | None]) -> str:
    """ "3 / 2 / 0": seeds above / level / below, and how many got no verdict ("—" where none
    did)."""
    given = [v for v in verdicts if v is not None]
    if not given:
        return "—"
    text = " / ".join(str(given.count(k)) for k in VERDICTS)
    missing = len(verdicts) - len(given)
    return text if not missing else f"{text} ({missing} without a verdict)"


def _points(gap: float | None) -> str:
    return "—" if gap is None else f"{gap:+.1f}"


def _seed_cell(seed: int, gap: float | None, call: str | None) -> str:
    return f"{seed}: {_points(gap)}" + ("" if call is None else f" ({call})")


def note_line(reading: Mapping[str, Any]) -> str | None:
    """A sentence per experiment: each method's final against the best member's, per seed."""
    gap = reading.get("final_gap")
    if not gap:
        return None
    members = set(reading.get("members") or ())
    parts = []
    paired = seeds = 0
    for method, entry in gap["methods"].items():
        if method in members:
            continue
        paired += sum(bool(p) for p in entry.get("paired_per_seed", ()))
        seeds += len(entry["seed_ids"])
        cells = ", ".join(
            _seed_cell(s, g, v)
            for s, g, v in zip(
                entry["seed_ids"], entry["gap_per_seed"], entry["verdict_per_seed"], strict=True
            )
        )
        chosen = [v for v in entry.get("chosen_verdict_per_seed") or () if v is not None]
        against = (
            f"; against the member chosen on the other seeds {counts(chosen)}" if chosen else ""
        )
        parts.append(f"{method} {_points(entry['median_gap'])} ({cells}{against})")
    if not parts:
        return None
    return (
        "Final accuracy against the best member's on each seed, at the envelope's final compute "
        f"(points; above or below beyond {CREDIBLE:g} standard errors of the gap over another draw "
        "of the eval problems, `experiments/final_gap.py`; paired problem by problem on "
        f"{paired} of {seeds} seeds, where both runs logged each row's verdict): "
        + "; ".join(parts)
        + "."
    )


def suite_lines(reading: Mapping[str, Any]) -> list[str]:
    """The suite's Markdown: per method and task (the task's sweep members left out), the gap to
    the best tuned final, per seed, and across tasks how many seeds end above, level and below."""
    rows, totals, chosen_totals = [], [], []
    for method, entry in reading["methods"].items():
        calls: list[str | None] = []
        chosen: list[str | None] = []
        for task, r in entry["tasks"].items():
            v = r.get("vs_tuned", {})
            members = (reading["tasks"].get(task, {}).get("envelope") or {}).get("members", ())
            if "final_gap" not in v or method in members:
                continue
            calls += v["final_gap_verdict_per_seed"]
            chosen += v.get("final_gap_chosen_verdict_per_seed") or []
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
                f"| {method} | {task} | {_points(v['final_gap'])} | "
                f"{counts(v['final_gap_verdict_per_seed'])} | {cells} |"
            )
        if calls:
            totals.append(f"{method} {counts(calls)}")
        if any(c is not None for c in chosen):
            chosen_totals.append(f"{method} {counts(chosen)}")
    if not rows:
        return []
    elsewhere = (
        " Against the member chosen on each seed's other seeds (the setting a user would have "
        "tuned on pilot runs): " + "; ".join(chosen_totals) + "."
        if chosen_totals
        else ""
    )
    return [
        "",
        "Final accuracy against the best tuned on-policy: each seed's smoothed accuracy at the "
        "envelope's final compute minus the highest final of any member on that seed, in points; "
        f"above or below beyond {CREDIBLE:g} standard errors of the gap over another draw of the "
        "eval problems (`experiments/final_gap.py`). Seeds above / level / below over every "
        "task: " + "; ".join(totals) + "." + elsewhere,
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
                gaps = [g for g in entries[name]["gap_per_seed"] if g is not None]
                ax.scatter([i - 0.4 + width / 2] * len(gaps), gaps, s=9, color="0.6", zorder=2)
        for j, name in enumerate(methods):
            if name not in entries:
                continue
            x = i - 0.4 + width * (j + 1.5)
            entry = entries[name]
            pairs = zip(entry["gap_per_seed"], entry["error_per_seed"], strict=True)
            read = [(g, e) for g, e in pairs if g is not None]
            if not read:
                continue
            gaps, errors = [g for g, _ in read], [e for _, e in read]
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
    ax.set_title(textwrap.fill(title, 12 * fig.get_figwidth()), fontsize=9)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
