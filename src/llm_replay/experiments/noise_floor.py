"""The noise floor of a suite's reading: the baseline read against itself.

The suite's acceptance reading (issue #38) asks a method never to fall below the baseline's seed
band, to reach its final accuracy within 1.0× its compute, and to keep its entropy and pass@k
within its interval, on every task. With a few seeds a second set of the baseline's own runs can
fail those tests: greedy accuracy moves several points between neighbouring evaluations, and a
target crossed early by a lucky baseline seed is reached late by everything else. How often, is
what a reading of a real method has to be held against.

With n ≥ k + 1 finished baseline runs on a task, every split of them into k runs read as the
baseline and the other n − k read as a method (`self`) goes through the same `compare_methods`
and `task_reading` a real method does. Seeds are relabelled so each `self` run is paired with a
baseline run of another seed (a different prompt order and sampling stream: exactly the noise).
Reported per task: the splits, and the share of them in which `self` fails each test; across
tasks, the chance that at least one task fails a test, taking tasks as independent.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from llm_replay.experiments.analysis import RunCurves, compare_methods

BASIS = "mu_5"
Reader = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def relabelled(run: RunCurves, seed: int) -> RunCurves:
    """The same run under another seed label (`compare_methods` pairs runs by seed)."""
    return replace(run, run_dir=run.run_dir.parent / f"seed-{seed}")


def self_readings(
    runs: Sequence[RunCurves], read: Reader, baseline_seeds: int = 3
) -> list[dict[str, Any]]:
    """One reading of `self` against the baseline per split of `runs` (see the module docstring):
    `read(method_summary, baseline_summary)` is the suite's `task_reading`."""
    n, k = len(runs), baseline_seeds
    if k < 2 or n <= k:
        raise ValueError(
            f"{n} runs: a split needs {k} baseline runs (k >= 2) and at least one more"
        )
    readings = []
    for chosen in itertools.combinations(range(n), k):
        rest = [i for i in range(n) if i not in chosen]
        base = [relabelled(runs[i], j) for j, i in enumerate(chosen)]
        other = [relabelled(runs[i], j) for j, i in enumerate(rest)]
        summary = compare_methods(
            {"baseline": base, "self": other}, baseline="baseline", bases=[BASIS]
        )
        reading = read(summary["methods"]["self"], summary["methods"]["baseline"])
        reading["baseline_runs"] = [runs[i].seed for i in chosen]
        readings.append(reading)
    return readings


def failure_shares(readings: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The share of splits in which `self` fails each acceptance test."""
    n = len(readings)

    def share(failed: Any) -> float:
        return sum(bool(failed(r)) for r in readings) / n

    return {
        "ratio_above_1": share(lambda r: r["ratio"] is None or r["ratio"] > 1.0),
        "below_band": share(lambda r: r["worst_margin"] is not None and r["worst_margin"] < 0),
        "entropy_not_kept": share(lambda r: r["entropy_kept"] is False),
        "pass_not_kept": share(lambda r: r["pass_kept"] is False),
    }


def task_noise_floor(
    runs: Sequence[RunCurves], read: Reader, baseline_seeds: int = 3
) -> dict[str, Any]:
    """The splits' readings of one task, summarised."""
    readings = self_readings(runs, read, baseline_seeds)
    ratios = sorted(math.inf if r["ratio"] is None else float(r["ratio"]) for r in readings)
    margins = sorted(float(r["worst_margin"]) for r in readings if r["worst_margin"] is not None)
    return {
        "runs": len(runs),
        "baseline_seeds": baseline_seeds,
        "splits": len(readings),
        "fails": failure_shares(readings),
        "ratios": ratios,
        "worst_margins": margins,
    }


def suite_noise_floor(tasks: dict[str, dict[str, Any]], *, gain_tasks: set[str]) -> dict[str, Any]:
    """Across tasks: the chance that at least one task fails each test (tasks independent); the
    ratio test only over the tasks the baseline gains on, as in the suite's reading."""
    across: dict[str, float] = {}
    for test in ("ratio_above_1", "below_band", "entropy_not_kept", "pass_not_kept"):
        names = [t for t in tasks if test != "ratio_above_1" or t in gain_tasks]
        passes = math.prod(1.0 - tasks[t]["fails"][test] for t in names)
        across[test] = 1.0 - passes
    return {"tasks": tasks, "any_task_fails": across}


def noise_floor_markdown(floor: dict[str, Any]) -> str:
    """The noise floor as Markdown: per task, then the chance some task fails."""
    lines = [
        "The baseline against itself: every split of its runs into "
        "baseline and `self`, read as a method is read.",
        "",
        "| task | runs (baseline) | splits | ratio > 1.0× | below band | entropy below | "
        "pass@8 below | ratios (min–max) | worst margins (min–max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, t in floor["tasks"].items():
        f = t["fails"]
        ratios = [r for r in t["ratios"] if math.isfinite(r)]
        span = f"{min(ratios):.2f}–{max(ratios):.2f}×" if ratios else "—"
        never = len(t["ratios"]) - len(ratios)
        span += f" ({never} never)" if never else ""
        m = t["worst_margins"]
        margins = f"{m[0]:+.1f} to {m[-1]:+.1f}" if m else "—"
        lines.append(
            f"| {task} | {t['runs']} ({t['baseline_seeds']}) | {t['splits']} | "
            f"{f['ratio_above_1']:.0%} | {f['below_band']:.0%} | {f['entropy_not_kept']:.0%} | "
            f"{f['pass_not_kept']:.0%} | {span} | {margins} |"
        )
    a = floor["any_task_fails"]
    lines += [
        "",
        f"Chance that some task fails (tasks independent): ratio > 1.0× {a['ratio_above_1']:.0%}, "
        f"below band {a['below_band']:.0%}, entropy {a['entropy_not_kept']:.0%}, "
        f"pass@8 {a['pass_not_kept']:.0%}.",
    ]
    return "\n".join(lines)
