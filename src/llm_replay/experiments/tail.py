"""The tail of a saving: each seed's ratio held against on-policy's own seed-to-seed spread.

A user runs one seed, so a median over seeds is not what they get: a seed of a method that needs
more compute than on-policy to reach on-policy's final accuracy, or never reaches it, is what they
might get. But the suite's per-seed ratio pairs seed s of a method with seed s of on-policy, and
on-policy's seed s has its own luck: its final accuracy, the target, moves several points from
seed to seed, and its compute to reach it too. So a ratio above 1 is partly on-policy's seed and
not the method. How much is measured the same way for both: every run of a method read against
every on-policy run of *another* seed (cross pairs: a different prompt order and sampling
stream), and every on-policy run read against every other on-policy run. A method whose share of
cross pairs above 1.0× (and never reached) is no higher than on-policy's own share is as safe on
one seed as running on-policy twice; the excess, where there is one, is the method's own tail.

Beside it, two readings of each seed: paired (seed s against on-policy's seed s, the suite's)
and against a common target (on-policy's mean final accuracy, the compute divided by the median
compute on-policy's seeds took to reach it), which takes the target's luck out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import RunCurves
from llm_replay.experiments.plot_style import finish_task_grid, styles, task_grid

BASIS = "mu_5"
NEVER = math.inf


def pair_ratio(run: RunCurves, reference: RunCurves, basis: str = BASIS) -> float | None:
    """Compute `run` needs to reach `reference`'s smoothed final accuracy ÷ what `reference`
    needed (inf: never reached; None: the reference's target was there from the start)."""
    target = float(reference.smoothed[-1])
    cost = reference.reach(target, basis)
    if not cost:
        return None
    reached = run.reach(target, basis)
    return NEVER if reached is None else reached / cost


def cross_ratios(
    runs: Mapping[int, RunCurves], references: Mapping[int, RunCurves], basis: str = BASIS
) -> list[float]:
    """Every run against every reference run of another seed."""
    out = []
    for seed, run in runs.items():
        for other, reference in references.items():
            if other != seed and (ratio := pair_ratio(run, reference, basis)) is not None:
                out.append(ratio)
    return out


def common_target_ratios(
    runs: Mapping[int, RunCurves], references: Mapping[int, RunCurves], basis: str = BASIS
) -> dict[int, float | None]:
    """Each run's compute to reach the references' mean final accuracy ÷ the median compute the
    references took to reach it (a reference that never did counts as infinite; None for every
    run where the median reference never did, or was there from the start)."""
    target = float(np.mean([r.smoothed[-1] for r in references.values()]))
    costs = [r.reach(target, basis) for r in references.values()]
    cost = float(np.median([NEVER if c is None else c for c in costs]))
    out: dict[int, float | None] = {}
    for seed, run in runs.items():
        if math.isinf(cost) or cost == 0:
            out[seed] = None
            continue
        reached = run.reach(target, basis)
        out[seed] = NEVER if reached is None else reached / cost
    return out


def shares(ratios: Sequence[float]) -> dict[str, Any]:
    """How many, the share above 1.0× (never reached included), the share never reached, the
    median and 90th percentile (the upper of two middle values: never reached is infinite) and
    the worst."""
    values = np.asarray(ratios, dtype=np.float64)
    if not len(values):
        return {"pairs": 0}
    return {
        "pairs": len(values),
        "above_1": float(np.mean(values > 1.0)),
        "never": float(np.mean(np.isinf(values))),
        "median": float(np.quantile(values, 0.5, method="higher")),  # no mean of inf and a ratio
        "p90": float(np.quantile(values, 0.9, method="higher")),
        "worst": float(values.max()),
    }


def task_tail(
    method: Mapping[int, RunCurves],
    baseline: Mapping[int, RunCurves],
    basis: str = BASIS,
    own: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One method on one task (both keyed by seed; the baseline needs two seeds or more); `own`:
    the baseline against itself (`shares(cross_ratios(baseline, baseline))`), where a caller
    reading several methods has it already."""
    paired = {s: pair_ratio(run, baseline[s], basis) for s, run in method.items() if s in baseline}
    own = shares(cross_ratios(baseline, baseline, basis)) if own is None else own
    cross = shares(cross_ratios(method, baseline, basis))
    excess = None
    if own.get("pairs") and cross.get("pairs"):
        excess = cross["above_1"] - own["above_1"]
    return {
        "seeds": sorted(method),
        "baseline_seeds": sorted(baseline),
        "paired": {str(s): _plain(r) for s, r in sorted(paired.items())},
        "common_target": {
            str(s): _plain(r)
            for s, r in sorted(common_target_ratios(method, baseline, basis).items())
        },
        "cross": cross,
        "baseline_against_itself": own,
        "excess_above_1": excess,
    }


def _plain(value: float | None) -> float | str | None:
    """JSON has no infinity: a never-reached ratio is written "never"."""
    if value is None:
        return None
    return "never" if math.isinf(value) else float(value)


def tail_markdown(tails: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """task → method → `task_tail`, as the table RESULTS quotes."""
    lines = [
        "| task | method | seeds | paired per seed | against a common target | cross pairs > 1.0× "
        "(never) | on-policy against itself > 1.0× (never) | excess |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, methods in tails.items():
        for name, tail in methods.items():
            cross, own = tail["cross"], tail["baseline_against_itself"]
            if not cross.get("pairs") or not own.get("pairs"):
                continue
            excess = tail["excess_above_1"]
            lines.append(
                f"| {task} | {name} | {len(tail['seeds'])} | {_list(tail['paired'])} | "
                f"{_list(tail['common_target'])} | {cross['above_1']:.0%} ({cross['never']:.0%}) "
                f"| {own['above_1']:.0%} ({own['never']:.0%}) | {excess:+.0%} |"
            )
    return "\n".join(lines)


def _list(ratios: Mapping[str, Any]) -> str:
    def one(value: Any) -> str:
        return "—" if value is None else ("never" if value == "never" else f"{value:.2f}")

    return " ".join(one(v) for v in ratios.values())


def plot_tails(
    tails: Mapping[str, Mapping[str, Mapping[str, Any]]],
    runs: Mapping[str, Mapping[str, Mapping[int, RunCurves]]],
    baseline: str,
    path: Path,
    basis: str = BASIS,
) -> list[Path]:
    """Per task, the cross-pair ratios of on-policy against itself and of each method on a log
    axis, never reached drawn at the top; the paired seeds as crosses."""
    tasks = [t for t in tails if tails[t]]
    if not tasks:
        return []
    names = sorted({name for t in tasks for name in tails[t]})
    style = styles([baseline, *names], baseline)
    plt, fig, axes = task_grid(len(tasks), 3.4, 3.4)
    never_at, legend = 8.0, {}
    for ax, task in zip(axes.flat, tasks, strict=False):
        base = runs[task][baseline]
        columns = [(baseline, cross_ratios(base, base, basis))]
        columns += [(name, cross_ratios(runs[task][name], base, basis)) for name in tails[task]]
        for x, (name, values) in enumerate(columns):
            shown = np.minimum(np.asarray(values, dtype=float), never_at)
            jitter = np.random.default_rng(x).uniform(-0.3, 0.3, len(shown))
            legend[name] = ax.scatter(
                x + jitter, shown, s=7, alpha=0.4, color=style[name]["color"], lw=0
            )
            paired = [v for v in tails[task].get(name, {}).get("paired", {}).values() if v]
            dots = [never_at if v == "never" else min(float(v), never_at) for v in paired]
            ax.scatter([x] * len(dots), dots, s=22, color="black", marker="x", lw=1)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_ylim(0.08, never_at * 1.3)
        ax.set_xticks(range(len(columns)), [""] * len(columns))
        ax.set_title(task)
        ax.set_ylabel(f"compute to target ÷ reference's ({basis})", fontsize=8)
    title = "each seed against every on-policy seed but its own (x: its own; top: never)"
    return finish_task_grid(plt, fig, axes, len(tasks), legend, title, path, right=0.8)
