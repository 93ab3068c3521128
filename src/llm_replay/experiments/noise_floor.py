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

A method is read over the same splits exactly as `self` is: its runs of the seeds outside the
band, paired across seeds with the band's runs. A method whose share of failing splits is no
higher than `self`'s fails the tests no more often than on-policy's own seeds do. (Reading a
method on the band's own seeds instead would pair each run with the baseline run of its seed,
which shares its prompt order and sampling stream: less noisy than `self`, so not comparable.)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from llm_replay.experiments.analysis import RunCurves, compare_methods

BASIS = "mu_5"
NEVER_DRAWN = 2.5  # where a split whose median seed never reached the target is drawn
Reader = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def relabelled(run: RunCurves, seed: int) -> RunCurves:
    """The same run under another seed label (`compare_methods` pairs runs by seed)."""
    return replace(run, run_dir=run.run_dir.parent / f"seed-{seed}")


def split_readings(
    base: dict[int, RunCurves],
    read: Reader,
    baseline_seeds: int = 3,
    method: dict[int, RunCurves] | None = None,
) -> list[dict[str, Any]]:
    """Per split of the baseline's runs (keyed by seed) into `baseline_seeds` read as the
    baseline: the reading of the baseline's other runs (`method` None), or of `method`'s runs of
    those same other seeds (splits where it lacks one are skipped). Either way the read runs are
    seeds outside the band, each paired with a band run of another seed (the j-th with the
    (j mod k)-th), so a method and the baseline's own runs are read alike: as many runs, the
    same band, the same cross-seed pairing."""
    n, k = len(base), baseline_seeds
    if k < 2 or n <= k:
        raise ValueError(
            f"{n} runs: a split needs {k} baseline runs (k >= 2) and at least one more"
        )
    seeds = sorted(base)
    readings = []
    for chosen in itertools.combinations(seeds, k):
        rest = [s for s in seeds if s not in chosen]
        source = base if method is None else method
        if not all(s in source for s in rest):
            continue
        baseline = [relabelled(base[s], j) for j, s in enumerate(chosen)]
        other = [relabelled(source[s], j % k) for j, s in enumerate(rest)]
        summary = compare_methods(
            {"baseline": baseline, "self": other}, baseline="baseline", bases=[BASIS]
        )
        reading = read(summary["methods"]["self"], summary["methods"]["baseline"])
        reading["baseline_runs"] = list(chosen)
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


def summarised(readings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Splits, the share failing each test, and the sorted ratios and worst margins."""
    ratios = sorted(math.inf if r["ratio"] is None else float(r["ratio"]) for r in readings)
    margins = sorted(float(r["worst_margin"]) for r in readings if r["worst_margin"] is not None)
    return {
        "splits": len(readings),
        "fails": failure_shares(readings),
        "ratios": ratios,
        "worst_margins": margins,
    }


def task_noise_floor(
    base: dict[int, RunCurves],
    read: Reader,
    baseline_seeds: int = 3,
    methods: dict[str, dict[int, RunCurves]] | None = None,
) -> dict[str, Any]:
    """The baseline against itself on one task, and each of `methods` read over the same splits
    (every run keyed by its seed)."""
    out = {
        "runs": len(base),
        "baseline_seeds": baseline_seeds,
        **summarised(split_readings(base, read, baseline_seeds)),
        "methods": {},
    }
    for name, method_runs in (methods or {}).items():
        readings = split_readings(base, read, baseline_seeds, method_runs)
        if readings:
            out["methods"][name] = summarised(readings)
    return out


TESTS = ("ratio_above_1", "below_band", "entropy_not_kept", "pass_not_kept")


def any_task_fails(shares: dict[str, dict[str, float]], gain_tasks: set[str]) -> dict[str, float]:
    """From each task's failure shares, the chance that at least one task fails each test, tasks
    taken as independent; the ratio test only over the tasks the baseline gains on."""
    out: dict[str, float] = {}
    for test in TESTS:
        names = [t for t in shares if test != "ratio_above_1" or t in gain_tasks]
        out[test] = 1.0 - math.prod(1.0 - shares[t][test] for t in names)
    return out


def suite_noise_floor(tasks: dict[str, dict[str, Any]], *, gain_tasks: set[str]) -> dict[str, Any]:
    """Across tasks, for the baseline against itself and for every method read on every task's
    splits: the chance that some task fails each test."""
    methods = sorted({m for t in tasks.values() for m in t.get("methods", {})})
    everywhere = [m for m in methods if all(m in t.get("methods", {}) for t in tasks.values())]
    return {
        "tasks": tasks,
        "any_task_fails": any_task_fails({t: v["fails"] for t, v in tasks.items()}, gain_tasks),
        "methods_any_task_fails": {
            m: any_task_fails({t: v["methods"][m]["fails"] for t, v in tasks.items()}, gain_tasks)
            for m in everywhere
        },
    }


def noise_floor_markdown(floor: dict[str, Any]) -> str:
    """The noise floor as Markdown: per task, the baseline against itself (`self`) and every
    method over the same splits; then the chance that some task fails each test."""
    lines = [
        "Every split of the baseline's runs into three read as the baseline: `self` is the rest "
        "of its runs, a method its runs of those other seeds. Share of splits failing each test:",
        "",
        "| task | read | splits | ratio > 1.0× | below band | entropy below | pass@8 below | "
        "ratios (min–max) | worst margins (min–max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, t in floor["tasks"].items():
        for name, entry in [("self", t), *t.get("methods", {}).items()]:
            lines.append(f"| {task} | {name} | {_row(entry, no_gain=bool(t.get('no_gain')))} |")
    lines += [
        "",
        "Chance that some task fails each test (tasks taken as independent):",
        "",
        "| read | ratio > 1.0× | below band | entropy below | pass@8 below |",
        "|---|---|---|---|---|",
    ]
    chances = {"self": floor["any_task_fails"], **floor.get("methods_any_task_fails", {})}
    for name, a in chances.items():
        lines.append(f"| {name} | " + " | ".join(f"{a[test]:.0%}" for test in TESTS) + " |")
    return "\n".join(lines)


def _row(entry: dict[str, Any], *, no_gain: bool = False) -> str:
    """One read of one task; on a task the baseline gains nothing on, the ratio test is not
    applied (as in the suite's reading) and its column says so."""
    f = entry["fails"]
    ratios = [r for r in entry["ratios"] if math.isfinite(r)]
    span = f"{min(ratios):.2f}–{max(ratios):.2f}×" if ratios else "—"
    never = len(entry["ratios"]) - len(ratios)
    span += f" ({never} never)" if never else ""
    m = entry["worst_margins"]
    margins = f"{m[0]:+.1f} to {m[-1]:+.1f}" if m else "—"
    ratio_share = "no gain" if no_gain else f"{f['ratio_above_1']:.0%}"
    return (
        f"{entry['splits']} | {ratio_share} | {f['below_band']:.0%} | "
        f"{f['entropy_not_kept']:.0%} | {f['pass_not_kept']:.0%} | {span} | {margins}"
    )


def plot_noise_floor(floor: dict[str, Any], path: Path) -> Path:
    """Two rows of panels, one column per task: every split's compute ratio (top) and worst
    margin (bottom), for `self` and each method, with the tests' lines (1.0× and 0 points). A
    method whose dots sit where `self`'s do fails the tests as often as on-policy's own seeds."""
    from llm_replay.experiments.plot_style import pyplot as _pyplot

    plt = _pyplot()
    tasks = list(floor["tasks"])
    fig, axes = plt.subplots(2, len(tasks), figsize=(2.6 * len(tasks) + 1, 6.4), squeeze=False)
    for column, task in enumerate(tasks):
        entries = [("self", floor["tasks"][task]), *floor["tasks"][task]["methods"].items()]
        top, bottom = axes[0][column], axes[1][column]
        for x, (name, entry) in enumerate(entries):
            colour = "black" if name == "self" else f"C{x - 1}"
            ratios = [min(r, NEVER_DRAWN) for r in entry["ratios"]]
            top.scatter(_jitter(x, len(ratios)), ratios, s=14, color=colour)
            margins = entry["worst_margins"]
            bottom.scatter(_jitter(x, len(margins)), margins, s=14, color=colour)
        names = [name for name, _ in entries]
        for ax, line in ((top, 1.0), (bottom, 0.0)):
            ax.axhline(line, color="grey", linewidth=0.8, linestyle="--")
            ax.set_xticks(range(len(names)), names, rotation=30, fontsize=8)
        top.set_title(task)
    axes[0][0].set_ylabel(f"compute ratio (never drawn at {NEVER_DRAWN:g})")
    axes[1][0].set_ylabel("worst margin (points)")
    fig.suptitle(
        "The baseline against itself (self)\nand each method, over the same splits", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _jitter(x: int, n: int) -> list[float]:
    """n positions spread across ±0.125 around x, so a split's dots do not hide each other."""
    return [x + 0.25 * (i / max(1, n - 1) - 0.5) for i in range(n)]
