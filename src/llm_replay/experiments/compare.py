"""`llm-replay compare`: methods × seeds on one task and model, same compute budget, one summary.

An experiment file names the methods (a preset plus overrides each, applied after the experiment's
own `set:`, so a method's override wins), the seeds, the budget on a
chosen compute basis (`budget_basis`: measured seconds by default, or a cost basis such as `mu_5`),
how often to evaluate on that basis (so every method is evaluated at the same compute points), the
baseline and the bases to report compute on. Every row's config is built and checked (its
backend's mapping included) before the first run starts, so a row that cannot run is refused by
name with nothing written. Runs go one after another so they share the machine
fairly, seed by seed (every method's first seed before any second seed); each writes its own run
directory (`OUT/METHOD/seed-S`). A method may name its own `seeds` (more for the baseline and the
best methods) and its own `budget`; `extends: OTHER` marks a method as OTHER run to a larger budget
(same config otherwise), and its runs continue OTHER's finished runs from their final checkpoints
where those are on this machine, which logs exactly what a run from scratch would (a resumed run
logs what an uninterrupted one does), for the extra budget's cost only. That is how a baseline's
plateau is located without re-running it. The summary (`OUT/summary.json`) and the plots are
derived from the logs alone, so `llm-replay report` redraws them without re-running, from whatever
runs have finished. A run whose summary exists is skipped, so an interrupted comparison resumes;
with `archive: DIR` every finished run is also copied there in compact form (`llm_replay.experiments.archive`),
and a run found there is restored instead of re-run, so a comparison spread over sessions and
machines resumes from a committed directory.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.config import ConfigError, load_config
from llm_replay.config.parse import did_you_mean
from llm_replay.experiments.analysis import RunCurves, compare_methods
from llm_replay.experiments.archive import (
    ArchiveMismatch,
    Fingerprint,
    archive_run,
    archived_dir,
    restore_run,
)
from llm_replay.experiments.envelope import envelope_reading
from llm_replay.experiments.experiment_file import (
    BACKENDS,
    KEYS,
    METHOD_KEYS,
    Experiment,
    Method,
    experiment_from_mapping,
    load_experiment,
    parse_part,
    read_experiment_file,
    with_baseline,
)
from llm_replay.experiments.fingerprint import fingerprints
from llm_replay.experiments.sweep_knobs import sweep_coverage
from llm_replay.runtime.layout import CHECKPOINT_DIR, SUMMARY_FILE

log = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "KEYS",
    "METHOD_KEYS",
    "Experiment",
    "Method",
    "check_methods",
    "experiment_from_mapping",
    "load_experiment",
    "parse_part",
    "read_experiment_file",
    "run_config",
    "run_experiment",
    "summarise",
    "with_baseline",
]


def run_config(experiment: Experiment, method: Method, seed: int) -> Any:
    overrides = [
        *experiment.overrides,
        *method.overrides,  # a method's own setting wins over the experiment-wide one
        f"name={method.name}",
        f"train.seed={seed}",
        "train.iterations=1000000",
        f"train.compute_budget={experiment.budget_of(method)}",
        f"train.budget_basis={experiment.budget_basis}",
        f"eval.every_compute={experiment.eval_every}",
        "eval.every=1000000",
        f"log.run_dir={experiment.run_dir(method.name, seed)}",
        "log.tensorboard=false",
    ]
    try:
        config = load_config(method.config, overrides)
        if method.backend == "trl":
            check_trl(config)
    except ConfigError as error:
        raise ConfigError(f"methods.{method.name}: {error}") from None
    return config


def check_methods(experiment: Experiment, only: Sequence[str] | None = None) -> None:
    """Build and check the config of every row (those `only` names, if given) for its first
    seed, its backend's mapping included: a row that cannot run is refused by name before any
    run starts, whichever share of the runs (`part`) this process was given."""
    for method in experiment.methods:
        if only is None or method.name in only:
            run_config(experiment, method, experiment.seeds_of(method)[0])


def check_trl(config: Any) -> None:
    """Refuse, before anything runs, a config that backend 'trl' cannot run as written."""
    try:
        from llm_replay.integrations.trl.runner import trl_arguments
    except ImportError as error:
        raise ConfigError(f"backend 'trl': {error}") from None
    try:
        trl_arguments(config, config.run_dir / "trl")
    except ValueError as error:  # ConfigError included
        raise ConfigError(str(error)) from None


def run_experiment(
    experiment: Experiment,
    *,
    progress: bool = True,
    part: tuple[int, int] = (1, 1),
    only: Sequence[str] | None = None,
    runs: Sequence[tuple[Method, int]] | None = None,
) -> dict[str, Any] | None:
    """Run every method × seed not yet done, then summarise and plot what is finished.

    `only` keeps the runs of the methods it names (e.g. a method added to a running experiment).
    `part=(I, N)` then runs only every N-th of them starting at the I-th, so N processes (one per
    core, or per machine sharing the archive) split an experiment without running anything
    twice; each summarises whatever is finished when it ends (None: a part ended before any
    baseline run was finished, so there is nothing to compare yet). `runs` (a suite's share of
    its tasks' runs) replaces that selection, and then nothing is summarised."""
    from llm_replay.terminal import console

    i, n = part
    planned = planned_runs(experiment, only)
    if runs is None:  # a suite checked every task's rows before its first run
        check_methods(experiment, only)
    selected = planned[i - 1 :: n] if runs is None else list(runs)
    configs = [(m, s, run_config(experiment, m, s)) for m, s in selected]
    if experiment.archive is not None:  # refuse a stale archive before anything runs
        for method, seed, config in configs:
            _restore(experiment.archive, config.run_dir, method.name, seed, config)
    for index, (method, seed, config) in enumerate(configs, start=1):
        if (config.run_dir / SUMMARY_FILE).is_file():
            log.info("%s seed %d: done before, skipped", method.name, seed)
            if experiment.archive is not None:
                _archive(experiment.archive, method.name, seed, config)
            continue
        share = f" (part {i}/{n} of {len(planned)})" if n > 1 else ""
        console.rule(f"[bold]{index}/{len(configs)}[/]{share} {method.name} · seed {seed}")
        _run(experiment, method, seed, config, progress)
        if experiment.archive is not None:
            _archive(experiment.archive, method.name, seed, config)
    if runs is not None:  # a suite's share: the suite reads its tasks together
        return None
    baseline_done = any(
        (experiment.run_dir(experiment.baseline, s) / SUMMARY_FILE).is_file()
        or _archived(experiment, experiment.baseline, s)
        for s in experiment.seeds_of(experiment.method(experiment.baseline))
    )
    if not baseline_done and (n > 1 or only is not None):
        return None
    return summarise(experiment)


def planned_runs(
    experiment: Experiment, only: Sequence[str] | None = None
) -> list[tuple[Method, int]]:
    """The experiment's (method, seed) runs in order, only the methods `only` names if given."""
    planned = experiment.planned()
    if only is None:
        return planned
    names = [m.name for m in experiment.methods]
    unknown = sorted(set(only) - set(names))
    if unknown or not only:
        raise ConfigError(
            f"methods = {sorted(only)}: name one or more of {names}"
            + (did_you_mean(unknown[0], names) if unknown else "")
        )
    return [(m, s) for m, s in planned if m.name in only]


def _run(experiment: Experiment, method: Method, seed: int, config: Any, progress: bool) -> None:
    from llm_replay.terminal import run_training

    if method.backend == "trl":
        from llm_replay.integrations.trl.runner import run_trl

        run_trl(config, show_progress=progress)
        return
    resume = method.extends is not None and _continue_from(experiment, method, seed, config)
    run_training(config, show_progress=progress, resume=resume)


def _continue_from(experiment: Experiment, method: Method, seed: int, config: Any) -> bool:
    """Copy the extended method's finished run (with its final checkpoint) into this run's
    directory so that training resumes from it; False (run from scratch) where it is not here."""
    assert method.extends is not None
    base = experiment.method(method.extends)
    source = experiment.run_dir(base.name, seed)
    if not (source / SUMMARY_FILE).is_file() or not (source / CHECKPOINT_DIR / "DONE").is_file():
        log.warning(
            "%s seed %d: no finished run of %s with its checkpoint here; running from scratch",
            method.name,
            seed,
            base.name,
        )
        return False
    target = Path(config.run_dir)
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    (target / SUMMARY_FILE).unlink()
    log.info("%s seed %d: continuing %s from %s", method.name, seed, base.name, source)
    return True


def _archived(experiment: Experiment, method: str, seed: int) -> bool:
    if experiment.archive is None:
        return False
    return (archived_dir(experiment.archive, method, seed) / SUMMARY_FILE).is_file()


def protocol_of(config: Any) -> dict[str, Any]:
    """What makes two runs comparable: the resolved config, less where it logs and the device
    (a run may be resumed on another machine), in its JSON form. The archive adds the content
    fingerprints of its model and task (`fingerprint_of`) where it writes or checks one."""
    tree = {k: v for k, v in config.to_dict().items() if k != "log"}
    tree["model"] = {k: v for k, v in tree.get("model", {}).items() if k != "device"}
    return dict(json.loads(json.dumps(tree, default=str)))


def fingerprint_of(config: Any) -> Fingerprint:
    """The archive's lazy content check for `config` (`experiments/fingerprint.py`: a setting
    can keep its name while what it names changes). Where the model or task cannot be read on
    this machine, the check is skipped with a warning: the run restores as it did before
    fingerprints, and is not refused for what cannot be compared."""

    def compute() -> dict[str, str]:
        try:
            return fingerprints(config)
        except (OSError, ValueError) as error:  # ModelLoadError and TaskError included
            log.warning("%s: content not checked against the archive (%s)", config.name, error)
            return {}

    return compute


def _archive(archive: Path, method: str, seed: int, config: Any) -> None:
    archive_run(config.run_dir, archive, method, seed, protocol_of(config), fingerprint_of(config))


def _restore(archive: Path, run_dir: Path, method: str, seed: int, config: Any) -> None:
    try:
        restore_run(archive, run_dir, method, seed, protocol_of(config), fingerprint_of(config))
    except ArchiveMismatch as error:
        raise ConfigError(f"archive: {error}") from None


def first_config(experiment: Experiment, name: str) -> Any:
    """The config of `name`'s run of its first seed, as `compare` builds it."""
    method = experiment.method(name)
    return run_config(experiment, method, experiment.seeds_of(method)[0])


def split_distinct(experiment: Experiment, baseline: Sequence[RunCurves]) -> float | None:
    """The eval split's effective number of distinct problems (`evaluation.distinct_problems`)
    for logs that predate `eval/distinct`: the baseline's split rebuilt from its config, as its
    runs built it (every method of an experiment evaluates on the same split). None where every
    log says it itself (a seed whose log does not, beside seeds whose logs do, still needs it),
    or where the split cannot be rebuilt here (said in the log: the reading then takes the
    split's rows, `eval/size`)."""
    if all(np.isfinite(run.metric("eval/distinct")).any() for run in baseline):
        return None
    from llm_replay.evaluation import distinct_problems
    from llm_replay.runtime.task_builder import build_task

    try:
        config = first_config(experiment, experiment.baseline)
        return distinct_problems(list(build_task(config, quiet=True).eval[: config.eval.size]))
    except (ConfigError, ValueError, OSError) as error:
        log.warning(
            "%s: eval split not rebuilt (%s); resolution reads eval/size",
            experiment.baseline,
            error,
        )
        return None


def summarise(experiment: Experiment, dest: Path | None = None) -> dict[str, Any]:
    """Compare what has finished; write `summary.json` and the plots to `dest` (default: the
    experiment's `out`)."""
    from llm_replay.experiments.members import members_reading, plot_members
    from llm_replay.experiments.report import plot_experiment

    runs: dict[str, list[RunCurves]] = {}
    missing: list[str] = []
    for method, seed in experiment.planned():
        run_dir = experiment.run_dir(method.name, seed)
        if experiment.archive is not None:
            _restore(
                experiment.archive, run_dir, method.name, seed, run_config(experiment, method, seed)
            )
        if (run_dir / SUMMARY_FILE).is_file():
            runs.setdefault(method.name, []).append(RunCurves.load(run_dir))
        else:
            missing.append(f"{method.name}/seed-{seed}")
    if experiment.baseline not in runs:
        raise ConfigError(
            f"baseline {experiment.baseline!r}: no finished run yet; nothing to compare against"
        )
    paired = {c.seed for c in runs[experiment.baseline]}
    waiting = [f"{m}/seed-{c.seed}" for m, cs in runs.items() for c in cs if c.seed not in paired]
    if waiting:  # finished, but the baseline's run of that seed is not: left out until it is
        runs = {m: [c for c in cs if c.seed in paired] for m, cs in runs.items()}
        runs = {m: cs for m, cs in runs.items() if cs}
        missing += [f"{run} (its {experiment.baseline} run is not finished)" for run in waiting]
    summary = compare_methods(runs, baseline=experiment.baseline, bases=experiment.all_bases)
    if experiment.baseline_sweep:  # against on-policy tuned as a user would (issue #53)
        summary["envelope"] = envelope_reading(
            runs,
            baseline=experiment.baseline,
            sweep=experiment.baseline_sweep,
            bases=list(dict.fromkeys([*experiment.bases, "mu_5"])),
            distinct=split_distinct(experiment, runs[experiment.baseline]),
        )
        summary["envelope"]["sweep"] = sweep_coverage(  # the members read, the baseline first
            {m: protocol_of(first_config(experiment, m)) for m in summary["envelope"]["members"]},
            experiment.baseline,
        )
    members = members_reading(runs, experiment.baseline)  # a mixture: each member as a task
    if members is not None:
        summary["members"] = members
    summary["experiment"] = {
        "name": experiment.name,
        "seeds": list(experiment.seeds),
        "budget": experiment.budget,
        "budget_basis": experiment.budget_basis,
        "eval_every": experiment.eval_every,
        "bases": list(experiment.bases),
        "mu_curve": list(experiment.mu_curve),
        "methods": {
            m.name: {
                "config": m.config,
                "set": list(m.overrides),
                "backend": m.backend,
                "seeds": list(experiment.seeds_of(m)),
            }
            for m in experiment.methods
        },
        "set": list(experiment.overrides),
        "unfinished_runs": missing,
    }
    dest = experiment.out if dest is None else Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    summary["plots"] = [str(p) for p in plot_experiment(experiment, runs, summary, dest)]
    if members is not None:
        plots = plot_members(runs, experiment.baseline, experiment.name, dest)
        summary["plots"] += [str(p) for p in plots]
    return summary
