"""A suite: the same methods on several built-in tasks, each task its own experiment, and one
reading across them.

A default chosen on one task does not transfer (issue #38: `auto`, tuned on chain_sum and
spell_backward, ends 5 points below on-policy on a task it never saw), so a replay method is
judged on a suite. A suite file is an experiment file with a `tasks:` mapping: each entry names a
built-in task (`llm_replay.tasks.builtin`), which points every method at that task and its
shipped model (`builtin_overrides`), and may give the task its own `budget`, `eval_every` and
`set:` (on-policy's plateau differs by task). Every task becomes an experiment of its own under
`OUT/TASK/` with its archive under `ARCHIVE/TASK/`, so everything `compare` does (resuming,
archives, `extends:` continuations, `--part`, `--methods`) holds per task. `--part I/N` splits
the runs of all tasks together.

The reading across tasks (`suite_summary`) puts, for every method and task, the compute it
needed to reach the baseline's final accuracy (the μ = 5 basis), its worst margin against the
baseline's seed band after the first tenth of the budget, its final accuracy, entropy and pass@k
beside the baseline's interval; and across tasks the median and the worst ratio and the worst
margin, the acceptance reading of issue #38; beside the median, how far other seeds would move
it (a bootstrap over each task's seeds, the set of tasks held fixed). A task on which the
baseline gains less than `MIN_GAIN_POINTS` over its starting accuracy has no saving to measure:
it stays in the suite to show that replay does no harm (worst margin, final accuracy) and is
left out of the ratios.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llm_replay.config import ConfigError
from llm_replay.config.parse import did_you_mean
from llm_replay.experiments import envelope_plot, final_gap
from llm_replay.experiments.across_tasks import (
    suite_summary,
    task_reading,
)
from llm_replay.experiments.analysis import RunCurves
from llm_replay.experiments.compare import check_methods, planned_runs, run_experiment, summarise
from llm_replay.experiments.experiment_file import (
    Experiment,
    Method,
    experiment_from_mapping,
    read_experiment_file,
    with_baseline,
)
from llm_replay.experiments.noise_floor import (
    plot_noise_floor,
    suite_noise_floor,
    task_noise_floor,
)
from llm_replay.experiments.suite_stats import BASIS
from llm_replay.experiments.tail import cross_ratios, plot_tails, shares, task_tail
from llm_replay.runtime.layout import SUMMARY_FILE
from llm_replay.tasks.builtin import BUILTIN_TASKS, builtin_overrides

TASK_KEYS = {"budget", "eval_every", "set", "seeds"}
NOISE_FLOOR_SEEDS = 3
"""The baseline runs a noise-floor split reads as the baseline (the suite's rows have three
seeds); the others are read as a method. Needs at least one more finished baseline run."""


@dataclass(frozen=True)
class Suite:
    name: str
    out: Path
    tasks: dict[str, Experiment]

    @property
    def baseline(self) -> str:
        return next(iter(self.tasks.values())).baseline

    def with_baseline(self, name: str) -> Suite:
        return replace(self, tasks={t: with_baseline(e, name) for t, e in self.tasks.items()})


def is_suite(path: str | Path) -> bool:
    return "tasks" in read_experiment_file(path)


def load_suite(path: str | Path, *, quick: bool = False, out: str | None = None) -> Suite:
    """Read a suite file: one experiment per entry of `tasks:`."""
    path = Path(path)
    data = read_experiment_file(path)
    tasks = data.pop("tasks", None)
    if not isinstance(tasks, dict) or not tasks:
        raise ConfigError(f"{path}: tasks: a mapping of built-in task names to their settings")
    name = str(data.get("name", path.stem))
    root = Path(out or data.get("out", f"runs/{path.stem}"))
    archive = data.get("archive")
    experiments: dict[str, Experiment] = {}
    for task, spec in tasks.items():
        key = f"tasks.{task}"
        if task not in BUILTIN_TASKS:
            raise ConfigError(
                f"{key}: not a built-in task; choose from {sorted(BUILTIN_TASKS)}"
                + did_you_mean(task, BUILTIN_TASKS)
            )
        spec = {} if spec is None else spec
        if not isinstance(spec, dict) or set(spec) - TASK_KEYS:
            unknown = sorted(set(spec) - TASK_KEYS, key=str) if isinstance(spec, dict) else []
            raise ConfigError(
                f"{key}: a mapping of {sorted(TASK_KEYS)}, got {spec!r}"
                + (did_you_mean(unknown[0], TASK_KEYS, prefix=f"{key}.") if unknown else "")
            )
        own = dict(data)
        own.update({k: v for k, v in spec.items() if k != "set"})
        own["name"] = f"{name}-{task}"
        own["set"] = [*builtin_overrides(task), *data.get("set", []), *spec.get("set", [])]
        if archive is not None:
            own["archive"] = str(Path(str(archive)) / task)
        try:
            experiment = experiment_from_mapping(own, path, quick=quick)
        except ConfigError as error:
            raise ConfigError(f"{key}: {error}") from None
        experiments[task] = replace(experiment, out=root / task / ("quick" if quick else "full"))
    return Suite(name, root, experiments)


def run_suite(
    suite: Suite,
    *,
    progress: bool = True,
    part: tuple[int, int] = (1, 1),
    only: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
) -> None:
    """Run the suite's runs not yet done: every task's (or those of `tasks`), split
    `part`-wise across the tasks."""
    unknown = sorted(set(tasks or ()) - set(suite.tasks))
    if unknown:
        raise ConfigError(
            f"tasks = {unknown}: not in the suite; choose from {list(suite.tasks)}"
            + did_you_mean(unknown[0], suite.tasks)
        )
    i, n = part
    planned: list[tuple[str, Method, int]] = [
        (task, method, seed)
        for task, experiment in suite.tasks.items()
        if tasks is None or task in tasks
        for method, seed in planned_runs(experiment, only)
    ]
    share = planned[i - 1 :: n]
    for task in dict.fromkeys(t for t, _, _ in planned):  # every row first, before any run
        try:
            check_methods(suite.tasks[task], only)
        except ConfigError as error:
            raise ConfigError(f"tasks.{task}: {error}") from None
    for task, experiment in suite.tasks.items():
        runs = [(method, seed) for t, method, seed in share if t == task]
        if runs:
            run_experiment(experiment, progress=progress, runs=runs)


def report_suite(suite: Suite, against: str | None = None) -> dict[str, Any]:
    """Summarise every task with a finished baseline run, then read them across tasks; write
    `OUT/suite_summary.json` (or `OUT/against_NAME/`) and the per-task curves."""
    if against is not None:
        suite = suite.with_baseline(against)
    dest_name = None if against is None else f"against_{against}"
    summaries: dict[str, dict[str, Any]] = {}
    waiting: list[str] = []
    for task, experiment in suite.tasks.items():
        dest = None if dest_name is None else experiment.out / dest_name
        try:
            summaries[task] = summarise(experiment, dest)
        except ConfigError:  # no finished baseline run yet
            waiting.append(task)
    starts = {task: _start(suite.tasks[task]) for task in summaries}
    reading = suite_summary(summaries, suite.baseline, starts)
    reading["waiting_tasks"] = waiting
    guards = {
        task: {name: m["guard"] for name, m in summary["methods"].items() if m.get("guard")}
        for task, summary in summaries.items()
    }
    if any(guards.values()):
        reading["guard"] = {task: g for task, g in guards.items() if g}
    finished = {task: _finished(suite, task) for task in reading["tasks"]}
    floor = _noise_floor(suite, reading, finished)
    if floor is not None:
        reading["noise_floor"] = floor
    tails: dict[str, dict[str, Any]] = {}
    for task, runs in finished.items():
        base = runs.get(suite.baseline, {})
        if len(base) >= 2:
            own = shares(cross_ratios(base, base))
            tails[task] = {
                name: task_tail(method, base, own=own)
                for name, method in runs.items()
                if name != suite.baseline
            }
    if any(tails.values()):
        reading["tail"] = tails
    out = suite.out if dest_name is None else suite.out / dest_name
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite_summary.json").write_text(json.dumps(reading, indent=1) + "\n")
    reading["plots"] = [str(p) for p in plot_suite(suite, summaries, out)]
    reading["plots"] += [str(p) for p in envelope_plot.plot_suite_envelope(suite, summaries, out)]
    gaps = plot_suite_final_gap(suite, summaries, out)
    if gaps is not None:
        reading["plots"].append(str(gaps))
    if floor is not None:
        reading["plots"].append(str(plot_noise_floor(floor, out / "suite_noise_floor.png")))
    if reading.get("tail"):
        drawn = plot_tails(reading["tail"], finished, suite.baseline, out / "suite_tail.png")
        reading["plots"] += [str(p) for p in drawn]
    return reading


def plot_suite_final_gap(
    suite: Suite, summaries: dict[str, dict[str, Any]], out: Path
) -> Path | None:
    """`suite_final_gap.png`: each seed's final against the best tuned setting's, per task that
    declares a sweep, for every method outside the sweep (none without a sweep)."""
    from llm_replay.experiments.plot_style import styles

    readings = {
        task: s["envelope"]["final_gap"]
        for task, s in summaries.items()
        if (s.get("envelope") or {}).get("final_gap")
    }
    if not readings:
        return None
    members = {m for r in readings.values() for m in r.get("members", ())}
    names = list(dict.fromkeys(m.name for e in suite.tasks.values() for m in e.methods))
    first = next(iter(suite.tasks.values()))
    return final_gap.plot_gaps(
        readings,
        [m for m in names if m not in members],
        out / "suite_final_gap.png",
        title=f"{suite.name}: final accuracy against the best tuned on-policy setting, per seed "
        f"(bars: ±{final_gap.CREDIBLE:g} standard errors)",
        styles=styles(names, first.baseline),
    )


def _finished(suite: Suite, task: str) -> dict[str, dict[int, RunCurves]]:
    """Every finished run of a task, by method and seed."""
    experiment = suite.tasks[task]
    finished: dict[str, dict[int, RunCurves]] = {}
    for method in experiment.methods:
        for seed in experiment.seeds_of(method):
            run_dir = experiment.run_dir(method.name, seed)
            if (run_dir / SUMMARY_FILE).is_file():
                finished.setdefault(method.name, {})[seed] = RunCurves.load(run_dir)
    return finished


def _noise_floor(
    suite: Suite, reading: dict[str, Any], finished: dict[str, dict[str, dict[int, RunCurves]]]
) -> dict[str, Any] | None:
    """The baseline read against itself (`noise_floor`), and every method over the same splits,
    on every task where the baseline has more than NOISE_FLOOR_SEEDS finished runs; None when
    no task has."""
    tasks: dict[str, dict[str, Any]] = {}
    for task in reading["tasks"]:
        others = dict(finished[task])
        base = others.pop(suite.baseline, {})
        if len(base) > NOISE_FLOOR_SEEDS:
            tasks[task] = task_noise_floor(base, task_reading, NOISE_FLOOR_SEEDS, others)
            tasks[task]["no_gain"] = reading["tasks"][task]["no_gain"]
    if not tasks:
        return None
    gains = {t for t in tasks if not reading["tasks"][t]["no_gain"]}
    return suite_noise_floor(tasks, gain_tasks=gains)


def _start(experiment: Experiment) -> float | None:
    """The held-out accuracy the runs start from: the baseline's first evaluation (the same
    shipped model for every method), median over its finished runs."""
    from llm_replay.experiments.analysis import RunCurves

    firsts = [
        float(RunCurves.load(experiment.run_dir(experiment.baseline, seed)).accuracy[0])
        for seed in experiment.seeds_of(experiment.method(experiment.baseline))
        if (experiment.run_dir(experiment.baseline, seed) / SUMMARY_FILE).is_file()
    ]
    return statistics.median(firsts) if firsts else None


def plot_suite(suite: Suite, summaries: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    """One panel per task: held-out accuracy against μ = 5 compute, median over seeds with its
    band, every method beside the baseline."""
    from llm_replay.experiments.plot_style import band as _band
    from llm_replay.experiments.plot_style import finish_task_grid, finished_runs, task_grid
    from llm_replay.experiments.plot_style import styles as _styles

    if not summaries:
        return []
    tasks = list(summaries)
    plt, fig, axes = task_grid(len(tasks), 5.2, 3.8)
    first = suite.tasks[tasks[0]]  # every task runs the same methods: one colour each, suite-wide
    extends = {m.name: m.extends for m in first.methods if m.extends is not None}
    styles = _styles([m.name for m in first.methods], first.baseline, extends)
    legend: dict[str, Any] = {}
    for ax, task in zip(axes.flat, tasks, strict=False):
        _band(ax, finished_runs(suite.tasks[task]), "accuracy", BASIS, scale=100.0, styles=styles)
        for line in ax.get_lines():
            legend.setdefault(str(line.get_label()), line)
        ax.set_title(task)
        ax.set_xlabel("compute, μ = 5 basis")
        ax.set_ylabel("held-out accuracy (%)")
    title = f"{suite.name}: accuracy against compute, every task"
    path = out / "suite_accuracy_vs_compute.png"
    return finish_task_grid(plt, fig, axes, len(tasks), legend, title, path, right=0.86)
