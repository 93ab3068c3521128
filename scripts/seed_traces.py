"""Per-seed readings of a method against on-policy from an archive (issue #53): the compute
ratios seed by seed beside on-policy's own seed-to-seed spread, where the slow seeds fall
behind, their signal traces, and how in-run stopping rules would have fired on them.

    python scripts/seed_traces.py [--archive docs/experiment_suite/runs] [--out build/]
        [--tasks gcd,products,binary_alternation,lcm] [--method auto_kl_cov_ar3po]
        [--baseline on_policy] [--summary docs/experiment_suite_10seeds/suite_summary.json]

Reads `ARCHIVE/TASK/METHOD/seed-N/metrics.jsonl.gz` (or an unpacked `metrics.jsonl`), prints
Markdown tables and draws `OUT/seed_traces.png`. All ratios are on the μ = 5 basis, read as the
suite reads them (`llm_replay.experiments.analysis`: smoothed accuracy, reach, `_ratio`):

- *paired*: seed s of the method against on-policy's seed s, target its smoothed final accuracy
  (the summaries' `compute_to_target_ratio_per_seed`);
- *cross*: every method seed against every other seed's on-policy run (90 pairs at ten seeds),
  and on-policy's seeds against each other the same way: the per-seed noise floor;
- *splits*: with `--summary`, the suite's own noise floor (`experiments.noise_floor`: every
  split of on-policy's seeds into three read as the baseline, the median ratio of the rest, or
  of the method's runs of those seeds), as the suite's reading stored it;
- *common*: the compute to reach on-policy's median final accuracy, over on-policy's median
  compute to reach it: a reading that does not depend on which on-policy seed a run is paired
  with.

A seed is *slow* when its paired ratio is at least `SLOW` or it never reaches the target (the
seeds issue #53 names), *not ahead* when it is at least `NOT_AHEAD`. The rules are checked at
every `CHECKS` point of the budget, from the anneal's start to its end (after it the schedule
has already turned replay off), each with the evidence a run has up to that point.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import RunCurves, _ratio

BASIS = "mu_5"
SLOW = 1.3
NOT_AHEAD = 0.95  # replay saved under 5%: one evaluation step where on-policy reaches late
CHECKS = tuple(round(0.1 + 0.05 * i, 2) for i in range(11))  # 0.10 … 0.60
PHASES = (("full replay", 0.0, 0.1), ("anneal", 0.1, 0.6), ("after", 0.6, 1.01))
M2_MAX = 0.04  # M2PO's bound on the log-ratio second moment over stale rows (the anneal's m2_max)
Z = 1.645  # one-sided 95%
TRACES = (
    ("accuracy", "held-out accuracy, smoothed (%)"),
    ("reward/correct_rate", "fresh correct rate\n(adaptive stages: not on-policy's)"),
    ("train/replayed_fraction", "replayed fraction"),
    ("train/age_mean", "age of trained rows"),
    ("reward/zero_variance_groups", "zero-variance groups"),
    ("generation/entropy", "fresh entropy"),
    ("drift", "log-ratio m2 / stale share"),
)
BINS = np.linspace(0.0, 1.0, 41)


@dataclass(frozen=True)
class Task:
    """One task's runs of the method and the baseline, keyed by seed, and the budget."""

    name: str
    method: dict[int, RunCurves]
    base: dict[int, RunCurves]
    budget: float


def load_run(run_dir: Path) -> RunCurves:
    """A run from its log, gzipped (an archive) or not (a run directory)."""
    packed = run_dir / "metrics.jsonl.gz"
    if packed.is_file():
        with gzip.open(packed, "rt", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    else:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    evals = tuple(r for r in records if r.get("kind") == "eval")
    if not evals:
        raise ValueError(f"{run_dir}: no evaluation records")
    return RunCurves(run_dir, evals, tuple(r for r in records if r.get("kind") == "train"))


def load_task(archive: Path, task: str, method: str, baseline: str) -> Task:
    def runs(name: str) -> dict[int, RunCurves]:
        found = sorted((archive / task / name).glob("seed-*"), key=lambda p: int(p.name[5:]))
        return {int(p.name[5:]): load_run(p) for p in found}

    method_runs, base_runs = runs(method), runs(baseline)
    if not method_runs or not base_runs:
        raise SystemExit(f"{archive / task}: no runs of {method} or {baseline}")
    budget = None
    for run in (*method_runs.values(), *base_runs.values()):
        protocol = run.run_dir / "protocol.json"
        if protocol.is_file():
            budget = json.loads(protocol.read_text())["train"].get("compute_budget")
            break
    if not budget:
        budget = max(float(r.compute(BASIS)[-1]) for r in base_runs.values())
    return Task(task, method_runs, base_runs, float(budget))


# ---- ratios ---------------------------------------------------------------------------------


def ratio(run: RunCurves, reference: RunCurves) -> float:
    """Compute to reach `reference`'s smoothed final accuracy over the reference's own (inf:
    never reached), as `compare_methods` reads a seed."""
    target = float(reference.smoothed[-1])
    value = _ratio(run.reach(target, BASIS), reference.reach(target, BASIS))
    return math.inf if value is None else value


def paired(task: Task) -> dict[int, float]:
    return {s: ratio(run, task.base[s]) for s, run in task.method.items() if s in task.base}


def cross(runs: dict[int, RunCurves], base: dict[int, RunCurves]) -> list[float]:
    """Every run against every baseline run of another seed."""
    return [ratio(run, ref) for s, run in runs.items() for t, ref in base.items() if s != t]


def common(task: Task) -> tuple[float, float, dict[str, dict[int, float]]]:
    """On-policy's median final accuracy, its median compute to reach it, and each seed's
    compute to reach it over that median (method and baseline alike)."""
    target = float(np.median([r.smoothed[-1] for r in task.base.values()]))

    def reach(run: RunCurves) -> float:
        value = run.reach(target, BASIS)
        return math.inf if value is None else value

    reference = float(np.median([reach(r) for r in task.base.values()]))
    reads = {
        name: {s: reach(r) / reference for s, r in runs.items()}
        for name, runs in (("method", task.method), ("base", task.base))
    }
    return target, reference, reads


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median and the shares above 1.0×, above 2.0× and never (inf) of some ratios."""
    array = np.asarray(values, dtype=float)
    return {
        "n": float(len(array)),
        "median": float(np.median(array)),
        "above_1": float((array > 1.0 + 1e-9).mean()),
        "above_2": float((array > 2.0).mean()),
        "never": float(np.isinf(array).mean()),
    }


def slow_seeds(ratios: dict[int, float], at: float = SLOW) -> set[int]:
    return {s for s, r in ratios.items() if r >= at - 1e-9}


# ---- traces ---------------------------------------------------------------------------------


def progress(run: RunCurves, budget: float) -> np.ndarray:
    return run.compute(BASIS) / budget


def train_trace(run: RunCurves, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(budget progress, value) of every training record holding `key`."""
    points = [
        (float(r["signals/progress"]), float(r[key]))
        for r in run.train_records
        if r.get(key) is not None and r.get("signals/progress") is not None
    ]
    if not points:
        return np.zeros(0), np.zeros(0)
    x, y = np.array(points).T
    return x, y


def drift(run: RunCurves, upto: float, since: float = 0.0) -> float | None:
    """The log-ratio second moment over the stale rows, pooled over the rounds from `since` to
    `upto` of the budget: mean m2 / mean stale share (None without stale rows)."""
    x, m2 = train_trace(run, "signals/log_ratio_m2")
    xs, stale = train_trace(run, "signals/stale_fraction")
    a, b = m2[(x >= since) & (x <= upto)], stale[(xs >= since) & (xs <= upto)]
    if not len(a) or not len(b) or b.mean() <= 0.05:
        return None
    return float(a.mean() / b.mean())


def binned(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.full(len(BINS), np.nan)
    if not len(x):
        return out
    index = np.clip(np.digitize(x, BINS) - 1, 0, len(BINS) - 1)
    for b in np.unique(index):
        out[b] = y[index == b].mean()
    return out


def trace(run: RunCurves, key: str, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """One trace to draw: accuracy at the evaluations, drift per bin, the rest binned."""
    if key == "accuracy":
        return progress(run, budget), 100.0 * run.smoothed
    if key == "drift":
        x, m2 = train_trace(run, "signals/log_ratio_m2")
        xs, stale = train_trace(run, "signals/stale_fraction")
        with np.errstate(invalid="ignore", divide="ignore"):
            return BINS, binned(x, m2) / np.where(
                binned(xs, stale) > 0.05, binned(xs, stale), np.nan
            )
    return BINS, binned(*train_trace(run, key))


def accuracy_at(run: RunCurves, budget: float, points: np.ndarray, raw: bool = False) -> np.ndarray:
    """Accuracy (points) at the run's evaluation nearest each point of the budget. Evaluations
    fall just past each multiple of `eval.every_compute`, by up to a round's compute, which
    differs between methods (adaptive rollouts make smaller rounds): the last evaluation at or
    before a method's would often be the baseline's previous one."""
    x = progress(run, budget)
    y = 100.0 * (run.accuracy if raw else run.smoothed)
    index = np.abs(x[None, :] - np.asarray(points, dtype=float)[:, None]).argmin(axis=1)
    return np.asarray(y[index], dtype=float)


def phase_gaps(task: Task, against: str) -> dict[int, list[float]]:
    """Per method seed, its smoothed accuracy minus on-policy's (its own seed's, `against` =
    "seed", or the median over on-policy's seeds, "median") at the method's evaluations,
    averaged over each of `PHASES`."""
    out = {}
    for s, run in task.method.items():
        x = progress(run, task.budget)
        mine = 100.0 * run.smoothed
        if against == "seed":
            theirs = accuracy_at(task.base[s], task.budget, x)
        else:
            theirs = np.median([accuracy_at(r, task.budget, x) for r in task.base.values()], axis=0)
        gaps = []
        for _, lo, hi in PHASES:
            sel = (x > lo + 1e-9) & (x <= hi + 1e-9) if lo > 0 else (x > 0) & (x <= hi + 1e-9)
            gaps.append(float(np.mean(mine[sel] - theirs[sel])) if sel.any() else math.nan)
        out[s] = gaps
    return out


def late_gain(run: RunCurves, budget: float, start: float = 0.6) -> float:
    """Smoothed accuracy at the end minus at `start` of the budget, in points."""
    return float(100.0 * run.smoothed[-1] - accuracy_at(run, budget, np.array([start]))[0])


# ---- stopping rules -------------------------------------------------------------------------

Rule = Callable[[Task, int, RunCurves, float], bool]


def rule_drift(task: Task, seed: int, run: RunCurves, at: float) -> bool:
    """Replay's rows are too far off-policy: the log-ratio second moment over stale rows,
    pooled from the start, above M2PO's bound."""
    value = drift(run, at)
    return value is not None and value > M2_MAX


def rule_band(task: Task, seed: int, run: RunCurves, at: float) -> bool:
    """Behind on-policy: the mean over the run's evaluations so far of its accuracy minus the
    median of on-policy's runs of the *other* seeds, one-sided 95% below 0 (needs on-policy
    runs of the task; the standard error from the spread of the per-evaluation gaps)."""
    others = [r for t, r in task.base.items() if t != seed]
    x = progress(run, task.budget)
    sel = (x > 0) & (x <= at + 1e-9)
    if sel.sum() < 3:
        return False
    mine = 100.0 * run.accuracy[sel]
    theirs = np.median([accuracy_at(r, task.budget, x[sel], raw=True) for r in others], axis=0)
    gaps = mine - theirs
    return bool(gaps.mean() + Z * gaps.std(ddof=1) / math.sqrt(len(gaps)) < 0)


def _slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    xc = x - x.mean()
    spread_x = float((xc * xc).sum())
    slope = float((xc * (y - y.mean())).sum() / spread_x)
    residuals = y - y.mean() - slope * xc
    return slope, math.sqrt(float((residuals**2).sum()) / (len(x) - 2) / spread_x)


def rule_reward_stall(task: Task, seed: int, run: RunCurves, at: float) -> bool:
    """Replay no longer buys fresh reward: the least-squares slope of the fresh correct rate
    against the budget, over every round from the anneal's start, one-sided 95% at or below 0."""
    x, y = train_trace(run, "reward/correct_rate")
    sel = (x >= CHECKS[0]) & (x <= at)
    if sel.sum() < 20:
        return False
    slope, error = _slope(x[sel], y[sel])
    return slope + Z * error <= 0


def rule_eval_stall(task: Task, seed: int, run: RunCurves, at: float) -> bool:
    """Held-out accuracy no longer rises: the slope of the evaluations from the anneal's start,
    one-sided 95% at or below 0."""
    x = progress(run, task.budget)
    sel = (x >= CHECKS[0] - 1e-9) & (x <= at + 1e-9)
    if sel.sum() < 4:
        return False
    slope, error = _slope(x[sel], 100.0 * run.accuracy[sel])
    return slope + Z * error <= 0


RULES: dict[str, Rule] = {
    f"drift > {M2_MAX:g}": rule_drift,
    "behind on-policy band": rule_band,
    "fresh reward stalled": rule_reward_stall,
    "eval stalled": rule_eval_stall,
}


def first_firing(rule: Rule, task: Task, seed: int, run: RunCurves) -> float | None:
    for at in CHECKS:
        if rule(task, seed, run, at):
            return at
    return None


def self_check(rule: Rule, task: Task) -> dict[int, float | None]:
    """The rule applied to each on-policy run (as if it were the method): how often it fires
    where nothing is behind. Meaningful for rules on evaluations; drift is 0 on-policy."""
    return {s: first_firing(rule, task, s, r) for s, r in task.base.items()}


# ---- report ---------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return "never" if math.isinf(value) else f"{value:.{digits}f}"


def spread_row(name: str, values: Sequence[float]) -> str:
    s = spread(values)
    return (
        f"| {name} | {int(s['n'])} | {fmt(s['median'])} | {s['above_1']:.0%} | "
        f"{s['above_2']:.0%} | {s['never']:.0%} |"
    )


def split_rows(floor: dict[str, Any] | None, task: str) -> list[str]:
    """The suite's split-based noise floor for `task` (from a suite summary), as table rows."""
    entry = (floor or {}).get("tasks", {}).get(task)
    if not entry:
        return []
    rows = [("on-policy, split medians (noise_floor.py)", entry["ratios"])]
    rows += [(f"{m}, split medians", e["ratios"]) for m, e in entry.get("methods", {}).items()]
    return [spread_row(name, [float(r) for r in ratios]) for name, ratios in rows]


def what_the_ratio_follows(
    task: Task, ratios: dict[int, float], common_ratios: dict[int, float]
) -> str:
    """Rank correlations over seeds of the paired ratio with its on-policy seed (the compute it
    took to reach its own target; the target's height above on-policy's median) and with the
    method seed's own speed (its common ratio)."""
    from scipy.stats import spearmanr

    seeds = sorted(ratios)
    if len(seeds) < 3:
        return ""
    finals = {s: float(r.smoothed[-1]) for s, r in task.base.items()}
    median = float(np.median(list(finals.values())))
    own = [task.base[s].reach(finals[s], BASIS) or 0.0 for s in seeds]
    capped = [min(ratios[s], 1e6) for s in seeds]

    def rho(other: Sequence[float]) -> str:
        with warnings.catch_warnings():  # a constant column has no rank correlation
            warnings.simplefilter("ignore")
            value = spearmanr(capped, [min(v, 1e6) for v in other])[0]
        return "—" if not np.isfinite(value) else f"{value:+.2f}"

    return (
        "Rank correlation over seeds of the paired ratio with its on-policy seed's compute to "
        f"its own target {rho(own)}, with that target's height above the median "
        f"{rho([finals[s] - median for s in seeds])}, with the method seed's common ratio "
        f"{rho([common_ratios[s] for s in seeds])}."
    )


def report(tasks: Sequence[Task], floor: dict[str, Any] | None = None) -> str:
    lines: list[str] = []
    labels: dict[tuple[str, int], float] = {}
    for task in tasks:
        ratios = paired(task)
        labels.update({(task.name, s): r for s, r in ratios.items()})
        target, reference, reads = common(task)
        targets = {s: float(r.smoothed[-1]) for s, r in task.base.items()}
        ranks = {s: i + 1 for i, s in enumerate(sorted(targets, key=lambda s: -targets[s]))}
        lines += [
            f"### {task.name}",
            "",
            "| seed | paired ratio | on-policy target (rank of "
            f"{len(targets)}) | on-policy reached it at | method reached it at | method best "
            f"| common ratio (method) | common ratio (on-policy) | drift 0–0.1 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for s, run in task.method.items():
            hit = run.reach(targets[s], BASIS)
            own = task.base[s].reach(targets[s], BASIS)  # never None: its own smoothed final
            lines.append(
                f"| {s}{' **slow**' if ratios[s] >= SLOW else ''} | {fmt(ratios[s])} | "
                f"{100 * targets[s]:.1f}% ({ranks[s]}) | "
                f"{fmt(None if own is None else own / task.budget)} | "
                f"{fmt(None if hit is None else hit / task.budget)} | "
                f"{100 * run.smoothed.max():.1f}% | {fmt(reads['method'][s])} | "
                f"{fmt(reads['base'].get(s))} | {fmt(drift(run, 0.1), 3)} |"
            )
        lines += [
            "",
            f"Common target {100 * target:.1f}% (on-policy's median final), reached by "
            f"on-policy's median at {reference / task.budget:.2f} of the budget. "
            + what_the_ratio_follows(task, ratios, reads["method"]),
            "",
            "| read | pairs | median | > 1.0× | > 2.0× | never |",
            "|---|---|---|---|---|---|",
            spread_row("method, paired (the summary)", list(ratios.values())),
            spread_row("method vs other seeds' on-policy", cross(task.method, task.base)),
            spread_row(
                "on-policy vs other seeds' on-policy (noise floor)", cross(task.base, task.base)
            ),
            *split_rows(floor, task.name),
            "",
            "Smoothed accuracy gap in points, mean over each phase's evaluations "
            "(full replay 0–0.1 | anneal 0.1–0.6 | after 0.6), and the gain from 0.6 to the end:",
            "",
            "| seed | vs its on-policy seed | vs on-policy's median | gain after 0.6, method "
            "| gain after 0.6, its on-policy seed |",
            "|---|---|---|---|---|",
        ]
        by_seed, by_median = phase_gaps(task, "seed"), phase_gaps(task, "median")
        for s in task.method:
            lines.append(
                f"| {s}{' **slow**' if ratios[s] >= SLOW else ''} | "
                + " / ".join(f"{g:+.1f}" for g in by_seed[s])
                + " | "
                + " / ".join(f"{g:+.1f}" for g in by_median[s])
                + f" | {late_gain(task.method[s], task.budget):+.1f} | "
                f"{late_gain(task.base[s], task.budget):+.1f} |"
            )
        lines.append("")
    lines += rule_report(tasks, labels)
    return "\n".join(lines)


def gap_after(task: Task, seed: int, at: float, until: float = 0.6) -> float:
    """The method seed's smoothed accuracy minus its on-policy seed's, mean over the method's
    evaluations from `at` to `until`: was replay behind where a rule would have stopped it?"""
    run = task.method[seed]
    x = progress(run, task.budget)
    sel = (x > at + 1e-9) & (x <= until + 1e-9)
    if not sel.any():
        return math.nan
    theirs = accuracy_at(task.base[seed], task.budget, x[sel])
    return float(np.mean(100.0 * run.smoothed[sel] - theirs))


def fire_all(rule: Rule, tasks: Sequence[Task]) -> dict[tuple[str, int], float]:
    fired = {}
    for task in tasks:
        for s, run in task.method.items():
            at = first_firing(rule, task, s, run)
            if at is not None:
                fired[(task.name, s)] = at
    return fired


def rule_report(tasks: Sequence[Task], labels: dict[tuple[str, int], float]) -> list[str]:
    slow = {k for k, r in labels.items() if r >= SLOW - 1e-9}
    behind = {k for k, r in labels.items() if r >= NOT_AHEAD - 1e-9}
    ahead = set(labels) - behind
    by_name = {t.name: t for t in tasks}
    lines = [
        "### Stopping rules on the archive",
        "",
        f"Checked at {CHECKS[0]:.2f}, {CHECKS[1]:.2f}, … {CHECKS[-1]:.2f} of the budget; first "
        f"firing as task seed@progress (paired ratio). Slow: paired ratio ≥ {SLOW}× or never "
        f"({len(slow)}); not ahead: ≥ {NOT_AHEAD}× ({len(behind)}); ahead: < {NOT_AHEAD}× "
        f"({len(ahead)}). Gap after: the fired seeds' mean smoothed accuracy minus their "
        "on-policy seed's from the firing to 0.6 (points; > 0: replay was still ahead where "
        "the rule would have stopped it).",
        "",
        "| rule | slow caught | not-ahead caught | ahead stopped (false alarms) | gap after "
        "| fired on | on-policy runs it fires on |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rule in RULES.items():
        fired = fire_all(rule, tasks)
        calibration = []
        if rule is not rule_drift:
            for task in tasks:
                calibration += list(self_check(rule, task).values())
        where = ", ".join(
            f"{t} {s}@{at:.2f} ({fmt(labels[(t, s)])})" for (t, s), at in sorted(fired.items())
        )
        gaps = [gap_after(by_name[t], s, at) for (t, s), at in fired.items()]
        floor = (
            f"{sum(v is not None for v in calibration)}/{len(calibration)}"
            if calibration
            else "n/a (0 on-policy)"
        )
        lines.append(
            f"| {name} | {len(slow & set(fired))}/{len(slow)} | "
            f"{len(behind & set(fired))}/{len(behind)} | {len(ahead & set(fired))}/{len(ahead)} "
            f"| {fmt(float(np.nanmean(gaps)) if gaps else None, 1)} | {where or '—'} | {floor} |"
        )
    lines += [
        "",
        "The drift rule's bound swept (pooled from the start, checked from 0.10):",
        "",
        "| bound | slow caught | not-ahead caught | ahead stopped | fired on |",
        "|---|---|---|---|---|",
    ]
    for bound in (0.03, 0.035, 0.04, 0.045, 0.05):

        def over(task: Task, seed: int, run: RunCurves, at: float, bound: float = bound) -> bool:
            value = drift(run, at)
            return value is not None and value > bound

        fired = fire_all(over, tasks)
        where = ", ".join(f"{t} {s} ({fmt(labels[(t, s)])})" for (t, s) in sorted(fired))
        lines.append(
            f"| {bound:g} | {len(slow & set(fired))}/{len(slow)} | "
            f"{len(behind & set(fired))}/{len(behind)} | {len(ahead & set(fired))}/{len(ahead)} "
            f"| {where or '—'} |"
        )
    return lines


def plot(tasks: Sequence[Task], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(TRACES), len(tasks), figsize=(3.6 * len(tasks), 2.3 * len(TRACES)), squeeze=False
    )
    for column, task in enumerate(tasks):
        ratios = paired(task)
        slow = sorted(slow_seeds(ratios))
        for row, (key, label) in enumerate(TRACES):
            ax = axes[row][column]
            for s, run in task.method.items():
                if s not in slow:
                    ax.plot(*trace(run, key, task.budget), color="0.75", linewidth=0.7)
            if key == "accuracy":
                points = np.linspace(0.05, 1.0, 20)
                median = np.median(
                    [accuracy_at(r, task.budget, points) for r in task.base.values()], axis=0
                )
                ax.plot(points, median, color="black", linewidth=1.4, label="on-policy median")
            elif key in (
                "reward/correct_rate",
                "generation/entropy",
                "reward/zero_variance_groups",
            ):
                curves = np.vstack([trace(r, key, task.budget)[1] for r in task.base.values()])
                with warnings.catch_warnings():  # a bin no run logged in stays empty
                    warnings.simplefilter("ignore", RuntimeWarning)
                    ax.plot(BINS, np.nanmedian(curves, axis=0), color="black", linewidth=1.2)
            for i, s in enumerate(slow):
                colour = f"C{i}"
                ax.plot(
                    *trace(task.method[s], key, task.budget),
                    color=colour,
                    linewidth=1.3,
                    label=f"seed {s} ({fmt(ratios[s])}×)",
                )
                if key == "accuracy":
                    ax.plot(
                        *trace(task.base[s], key, task.budget),
                        color=colour,
                        linestyle="--",
                        linewidth=1.0,
                    )
            for edge in (0.1, 0.6):
                ax.axvline(edge, color="grey", linestyle=":", linewidth=0.8)
            if key == "drift":
                ax.axhline(M2_MAX, color="red", linestyle=":", linewidth=0.8)
            ax.set_title(task.name if row == 0 else "", fontsize=9)
            if column == 0:
                ax.set_ylabel(label, fontsize=8)
            if row == len(TRACES) - 1:
                ax.set_xlabel("share of the μ = 5 budget", fontsize=8)
            ax.tick_params(labelsize=7)
            if row == 0:
                ax.legend(fontsize=6)
    fig.suptitle(
        "Slow seeds (colour; dashed: their on-policy seed) against the other seeds (grey) "
        "and on-policy's median (black); dotted: the anneal",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=Path("docs/experiment_suite/runs"))
    parser.add_argument("--out", type=Path, default=Path("build"), help="folder for the plot")
    parser.add_argument("--tasks", default="gcd,products,binary_alternation,lcm")
    parser.add_argument("--method", default="auto_kl_cov_ar3po")
    parser.add_argument("--baseline", default="on_policy")
    parser.add_argument(
        "--summary", type=Path, default=None, help="a suite summary holding its noise floor"
    )
    args = parser.parse_args(argv)
    floor = json.loads(args.summary.read_text()).get("noise_floor") if args.summary else None
    tasks = [
        load_task(args.archive, name, args.method, args.baseline) for name in args.tasks.split(",")
    ]
    print(report(tasks, floor))
    print(f"\n{plot(tasks, args.out / 'seed_traces.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
