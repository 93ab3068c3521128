"""The reading across tasks: every method's compute ratio, worst margin, entropy and pass@k per
task against the baseline, and across tasks the median and worst; in JSON (`suite_summary`) and
Markdown (`suite_markdown`).

A suite's tasks are experiments of their own (`suite.py`); a mixture's members are the tasks of one
run (`members.py`). Both read them here, so the two readings cannot drift apart. A task on which
the baseline gains less than `MIN_GAIN_POINTS` over its starting accuracy has no saving to
measure: it stays in the reading to show that replay does no harm (worst margin, final accuracy)
and is left out of the ratios.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from llm_replay.experiments import envelope, final_gap, resolution
from llm_replay.experiments.guard_reading import guard_lines
from llm_replay.experiments.noise_floor import noise_floor_markdown
from llm_replay.experiments.suite_stats import (
    BASIS,
    MEDIAN_RATIO_GOAL,
    PASS_KEY,
    kept,
    median_across_uncertainty,
    median_of,
    raised,
)
from llm_replay.experiments.suite_stats import interval_text as _interval
from llm_replay.experiments.suite_stats import ratio_text as _x
from llm_replay.experiments.suite_stats import share_text as _share
from llm_replay.experiments.tail import tail_markdown

MIN_GAIN_POINTS = 2.0
"""A task on which the baseline gains less than this (final over starting accuracy, held-out,
points) is a no-gain task: there is no saving to measure, so its compute ratio is left out of
the median and the worst ratio, and it is read for harm only (worst margin, final accuracy)."""


def suite_summary(
    summaries: dict[str, dict[str, Any]],
    baseline: str,
    starts: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """Per method: each task's reading against `baseline` and the reading across tasks.
    `starts` (each task's starting accuracy) marks the tasks the baseline gains nothing on."""
    methods = sorted({m for s in summaries.values() for m in s["methods"] if m != baseline})
    out: dict[str, Any] = {"baseline": baseline, "basis": BASIS, "tasks": {}, "methods": {}}
    for task, summary in summaries.items():
        base = summary["methods"][baseline]
        start = (starts or {}).get(task)
        gain = None if start is None else 100 * (summary["target_accuracy"] - start)
        out["tasks"][task] = {
            "start_accuracy": start,
            "target_accuracy": summary["target_accuracy"],
            "baseline_gain_points": gain,
            "no_gain": gain is not None and gain < MIN_GAIN_POINTS,
            "baseline_entropy": median_of(base.get("entropy")),
            "baseline_pass": median_of(base.get(PASS_KEY)),
            "baseline_seeds": base["seeds"],
        }
    for method in methods:
        rows = {
            task: {
                **task_reading(summary["methods"][method], summary["methods"][baseline]),
                "no_gain": out["tasks"][task]["no_gain"],
            }
            for task, summary in summaries.items()
            if method in summary["methods"]
        }
        out["methods"][method] = {"tasks": rows, "across": across_tasks(rows)}
    envelope.add_to_suite(out, summaries)  # against tuned on-policy, where a sweep is declared
    for method, worse in resolution.suite_resolution(out).items():
        out["methods"][method]["across"]["vs_tuned"]["resolved_worse"] = worse
    return out


def task_reading(method: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """One method on one task against the baseline."""
    ratio = method["compute_to_target_ratio"].get(BASIS)
    final, base_final = (
        median_of(method.get("final_accuracy")),
        median_of(base.get("final_accuracy")),
    )
    return {
        "seeds": method["seeds"],
        "ratio": ratio,
        "ratio_per_seed": method["compute_to_target_ratio_per_seed"].get(BASIS),
        "never_reached_seeds": method["never_reached_seeds"].get(BASIS, 0),
        "worst_margin": method.get(f"worst_margin_{BASIS}"),
        "final_accuracy": final,
        "final_delta_points": None
        if final is None or base_final is None
        else 100 * (final - base_final),
        "entropy": median_of(method.get("entropy")),
        "entropy_kept": kept(method.get("entropy"), base.get("entropy")),
        "pass": median_of(method.get(PASS_KEY)),
        "pass_kept": kept(method.get(PASS_KEY), base.get(PASS_KEY)),
        "pass_raised": raised(method.get(PASS_KEY), base.get(PASS_KEY)),
    }


def across_tasks(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Median and worst ratio over the tasks the baseline gains on (a task never reached counts
    as infinite), worst margin over every task, and how many tasks keep the baseline's entropy
    and pass@k."""
    ratios = [
        math.inf if r["ratio"] is None else float(r["ratio"])
        for r in rows.values()
        if not r.get("no_gain")
    ]
    margins = [float(r["worst_margin"]) for r in rows.values() if r["worst_margin"] is not None]
    per_seed = [  # a summary from before per-seed ratios were kept: its median, held fixed
        r.get("ratio_per_seed") or [r["ratio"]] for r in rows.values() if not r.get("no_gain")
    ]
    uncertainty = median_across_uncertainty(per_seed)
    return {
        "tasks": len(rows),
        "gain_tasks": len(ratios),
        "median_ratio": statistics.median(ratios) if ratios else None,
        "median_ratio_ci95": None if uncertainty is None else uncertainty["ci95"],
        "median_ratio_within_goal": None if uncertainty is None else uncertainty["within_goal"],
        "worst_ratio": max(ratios) if ratios else None,
        "worst_margin": min(margins) if margins else None,
        "entropy_kept": sum(bool(r["entropy_kept"]) for r in rows.values()),
        "pass_kept": sum(bool(r["pass_kept"]) for r in rows.values()),
        "pass_raised": sum(bool(r.get("pass_raised")) for r in rows.values()),
    }


def suite_markdown(reading: dict[str, Any]) -> str:
    """The reading as Markdown: one table across tasks, then one row per method and task."""
    lines = [
        f"Against `{reading['baseline']}`; compute to its final accuracy on the μ = 5 basis "
        "(× its own), medians over seeds.",
        "",
        "| method | tasks (baseline gains on) | median ratio [95% over seeds] | "
        f"resamples ≤ {MEDIAN_RATIO_GOAL}× | worst ratio | worst margin (points) | entropy kept "
        f"| {PASS_KEY} kept (raised) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in reading["methods"].items():
        a = entry["across"]
        lines.append(
            f"| {method} | {a['tasks']} ({a.get('gain_tasks', a['tasks'])}) | "
            f"{_x(a['median_ratio'])}{_interval(a.get('median_ratio_ci95'))} | "
            f"{_share(a.get('median_ratio_within_goal'))} | "
            f"{_x(a['worst_ratio'])} | {_pts(a['worst_margin'])} | "
            f"{a['entropy_kept']}/{a['tasks']} | {a['pass_kept']}/{a['tasks']} "
            f"({a.get('pass_raised', 0)}) |"
        )
    lines += [
        "",
        f"| task | start | {reading['baseline']} final (gain) | its entropy | its {PASS_KEY} |",
        "|---|---|---|---|---|",
    ]
    for task, t in reading["tasks"].items():
        start = "—" if t.get("start_accuracy") is None else f"{100 * t['start_accuracy']:.1f}%"
        gain = _pts(t.get("baseline_gain_points")) + (", no gain" if t.get("no_gain") else "")
        lines.append(
            f"| {task} | {start} | {100 * t['target_accuracy']:.1f}% ({gain}) | "
            f"{_num(t.get('baseline_entropy'))} | {_num(t.get('baseline_pass'))} |"
        )
    lines += [
        "",
        "| method | task | seeds | ratio | worst margin | final (Δ points) | entropy | "
        f"{PASS_KEY} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in reading["methods"].items():
        for task, r in entry["tasks"].items():
            final = "—" if r["final_accuracy"] is None else f"{100 * r['final_accuracy']:.1f}%"
            ratio = "no gain to save" if r.get("no_gain") else _x(r["ratio"])
            lines.append(
                f"| {method} | {task} | {r['seeds']} | {ratio} | "
                f"{_pts(r['worst_margin'])} | {final} ({_pts(r['final_delta_points'])}) | "
                f"{_num(r['entropy'])}{' (below)' if r['entropy_kept'] is False else ''} | "
                f"{_num(r['pass'])}{' (below)' if r['pass_kept'] is False else ''} |"
            )
    lines += envelope.suite_lines(reading)
    lines += resolution.suite_lines(reading)
    lines += final_gap.suite_lines(reading)
    for task, guards in reading.get("guard", {}).items():
        methods = {name: {"guard": guard} for name, guard in guards.items()}
        lines += ["", *(f"{task}: {line}" for line in guard_lines({"methods": methods}))]
    if reading.get("noise_floor"):
        lines += ["", noise_floor_markdown(reading["noise_floor"])]
    if reading.get("tail"):
        lines += [
            "",
            "Each seed against on-policy's other seeds (the tail, `experiments/tail.py`):",
        ]
        lines += ["", tail_markdown(reading["tail"])]
    return "\n".join(lines)


def _pts(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"
