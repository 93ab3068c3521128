"""A mixture's members read one by one: each member's curve against the baseline's at equal
compute, beside the mixture's overall reading (issue #56).

A run on a mixture logs the overall `eval/accuracy`, `eval/pass@k` and `eval/entropy` and each
member's own (`eval/<member>/accuracy`, `.../pass@k`, `.../entropy`). A member's *view* of a run
is the run with the member's readings in place of the overall ones, so everything the harness
reads of a task (compute to the baseline's final accuracy, the worst margin against its seed
band after the first tenth, entropy and pass@8 against its interval) is read of each member by
the same code, and the members are read across like a suite's tasks (`across_tasks`): the
mixture's run-level accuracy can look fine while one member starves, and this is where it shows.

"Starves" is read as the first compute, after the first tenth of the baseline's budget, at which
a method's median accuracy on a member falls below the floor of the baseline's seed band there,
and how far below it goes (`starving`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments.across_tasks import suite_markdown, suite_summary
from llm_replay.experiments.analysis import RunCurves, compare_methods, margins
from llm_replay.experiments.suite_stats import BASIS
from llm_replay.metrics.logging import CORRECT_ROWS

_MEMBER_KEY = re.compile(r"^eval/([^/]+)/(accuracy|entropy|pass@\d+)$")
_OVERALL = re.compile(r"^eval/(accuracy|entropy|pass@\d+)$")


def member_names(runs: Sequence[RunCurves]) -> list[str]:
    """The members the runs evaluate, in the order of the first run's first evaluation."""
    names: dict[str, None] = {}
    for run in runs[:1]:
        for key in run.records[0]:
            match = _MEMBER_KEY.match(key)
            if match and match.group(2) == "accuracy":
                names[match.group(1)] = None
    return list(names)


def member_view(run: RunCurves, name: str) -> RunCurves:
    """`run` with member `name`'s accuracy, pass@k and entropy as its overall readings (and no
    other member's, nor the whole split's row verdicts); compute, steps and training records
    unchanged."""
    prefix = f"eval/{name}/"
    if prefix + "accuracy" not in run.records[0]:
        raise ValueError(f"{run.run_dir}: no evaluation of member {name!r} ({prefix}accuracy)")
    records = []
    for record in run.records:
        kept = {
            k: v
            for k, v in record.items()
            if not _MEMBER_KEY.match(k) and not _OVERALL.match(k) and k != CORRECT_ROWS
        }
        for key, value in record.items():
            if key.startswith(prefix):
                kept["eval/" + key[len(prefix) :]] = value
        records.append(kept)
    return RunCurves(run.run_dir, tuple(records), run.train_records)


def members_reading(runs: dict[str, list[RunCurves]], baseline: str) -> dict[str, Any] | None:
    """Each member read against the baseline's same member (`suite_summary` over members, on
    the μ = 5 basis) plus `starving` per method and member; None when the runs have no members."""
    names = member_names(runs.get(baseline, []))
    if not names:
        return None
    views = {m: {k: [member_view(c, m) for c in cs] for k, cs in runs.items()} for m in names}
    summaries = {m: compare_methods(v, baseline=baseline, bases=[BASIS]) for m, v in views.items()}
    starts: dict[str, float | None] = {
        m: statistics.median(float(c.accuracy[0]) for c in views[m][baseline]) for m in names
    }
    reading = suite_summary(summaries, baseline, starts)
    for method, entry in reading["methods"].items():
        for member, row in entry["tasks"].items():
            row["starving"] = starving(views[member][method], views[member][baseline], BASIS)
    return reading


def starving(
    curves: Sequence[RunCurves], reference: Sequence[RunCurves], basis: str, after: float = 0.1
) -> dict[str, float] | None:
    """Where the method's median accuracy first falls below the floor of the reference's seed
    band after `after` of the reference's budget (as a share of that budget), and its lowest
    margin there in points; None when it never does."""
    grid, margin, end = margins(curves, reference, basis, after)
    below = np.flatnonzero(np.isfinite(margin) & (margin < 0))
    if not len(below):
        return None
    return {
        "from_budget_share": float(grid[below[0]] / end),
        "lowest_points": float(np.nanmin(margin[below])),
        "share_of_budget_below": float(len(below) / max(1, int(np.isfinite(margin).sum()))),
    }


def members_markdown(reading: dict[str, Any]) -> str:
    """The members' reading as Markdown: the across-members tables, then where each starves."""
    lines = ["Per member of the mixture, each read as a task:", "", suite_markdown(reading), ""]
    lines += [
        "| method | member | first below the baseline's band (share of budget) | lowest | "
        "share of the budget below |",
        "|---|---|---|---|---|",
    ]
    for method, entry in reading["methods"].items():
        for member, row in entry["tasks"].items():
            s = row.get("starving")
            if s is None:
                lines.append(f"| {method} | {member} | never | — | 0% |")
            else:
                lines.append(
                    f"| {method} | {member} | {s['from_budget_share']:.2f} | "
                    f"{s['lowest_points']:+.1f} points | {100 * s['share_of_budget_below']:.0f}% |"
                )
    return "\n".join(lines)


def plot_members(
    runs: dict[str, list[RunCurves]], baseline: str, title: str, out: Path
) -> list[Path]:
    """One panel per member (and one for the mixture overall): held-out accuracy against μ = 5
    compute, median over seeds with its band, every method beside the baseline."""
    from llm_replay.experiments.plot_style import band, finish_task_grid, styles, task_grid

    names = member_names(runs.get(baseline, []))
    if not names:
        return []
    colours = styles(list(runs), baseline, {})
    panels = ["overall", *names]
    plt, fig, axes = task_grid(len(panels), 5.2, 3.8)
    legend: dict[str, Any] = {}
    for ax, panel in zip(axes.flat, panels, strict=False):
        view = (
            runs
            if panel == "overall"
            else {k: [member_view(c, panel) for c in cs] for k, cs in runs.items()}
        )
        band(ax, view, "accuracy", BASIS, scale=100.0, styles=colours)
        for line in ax.get_lines():
            legend.setdefault(str(line.get_label()), line)
        ax.set_title("the mixture, overall" if panel == "overall" else panel)
        ax.set_xlabel("compute, μ = 5 basis")
        ax.set_ylabel("held-out accuracy (%)")
    path = out / "members_accuracy_vs_compute.png"
    return finish_task_grid(
        plt, fig, axes, len(panels), legend, f"{title}: every member", path, right=0.86
    )
