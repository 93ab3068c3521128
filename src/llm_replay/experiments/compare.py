"""`llm-replay compare`: methods × seeds on one task and model, same compute budget, one summary.

An experiment file names the methods (a preset plus overrides each, applied after the experiment's
own `set:`, so a method's override wins), the seeds, the budget on a
chosen compute basis (`budget_basis`: measured seconds by default, or a cost basis such as `mu_5`),
how often to evaluate on that basis (so every method is evaluated at the same compute points), the
baseline and the bases to report compute on. Runs go one after another so they share the machine
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from llm_replay.config import ConfigError, load_config
from llm_replay.config.files import find_config, preset_path
from llm_replay.config.parse import yaml_error
from llm_replay.experiments.analysis import RunCurves, compare_methods
from llm_replay.experiments.archive import (
    ArchiveMismatch,
    archive_run,
    archived_dir,
    restore_run,
)
from llm_replay.runtime.layout import CHECKPOINT_DIR, SUMMARY_FILE

log = logging.getLogger(__name__)
BACKENDS = ("native", "trl")  # trl: through ReplayGRPOTrainer (llm_replay.integrations.trl)


@dataclass(frozen=True)
class Method:
    name: str
    config: str
    overrides: tuple[str, ...] = ()
    backend: str = "native"
    seeds: tuple[int, ...] | None = None  # None: the experiment's seeds
    budget: float | None = None  # None: the experiment's budget
    extends: str | None = None  # a method this one continues to a larger budget


@dataclass(frozen=True)
class Experiment:
    name: str
    out: Path
    methods: tuple[Method, ...]
    seeds: tuple[int, ...]
    budget: float
    eval_every: float
    baseline: str
    budget_basis: str = "measured"
    bases: tuple[str, ...] = ("measured", "mu_5", "rollouts")
    mu_curve: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)
    overrides: tuple[str, ...] = ()
    archive: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def run_dir(self, method: str, seed: int) -> Path:
        return self.out / method / f"seed-{seed}"

    def seeds_of(self, method: Method) -> tuple[int, ...]:
        return method.seeds if method.seeds is not None else self.seeds

    def budget_of(self, method: Method) -> float:
        return method.budget if method.budget is not None else self.budget

    def method(self, name: str) -> Method:
        return next(m for m in self.methods if m.name == name)

    def planned(self) -> list[tuple[Method, int]]:
        """Every (method, seed), seed-major, the baseline first within a seed."""
        order = sorted(self.methods, key=lambda m: m.name != self.baseline)
        seeds = sorted({s for m in self.methods for s in self.seeds_of(m)})
        return [(m, s) for s in seeds for m in order if s in self.seeds_of(m)]

    @property
    def all_bases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.bases, *(f"mu_{m:g}" for m in self.mu_curve)]))


METHOD_KEYS = {"config", "set", "backend", "seeds", "budget", "extends"}
KEYS = {
    "name",
    "out",
    "methods",
    "seeds",
    "budget",
    "budget_basis",
    "eval_every",
    "baseline",
    "bases",
    "mu_curve",
    "set",
    "quick",
    "archive",
}


def read_experiment_file(path: str | Path) -> dict[str, Any]:
    """An experiment (or suite) file's top-level mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such experiment file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(yaml_error(path, error)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def load_experiment(path: str | Path, *, quick: bool = False, out: str | None = None) -> Experiment:
    """Read and validate an experiment file; `quick` applies its `quick:` section on top."""
    path = Path(path)
    return experiment_from_mapping(read_experiment_file(path), path, quick=quick, out=out)


def experiment_from_mapping(
    data: dict[str, Any], path: Path, *, quick: bool = False, out: str | None = None
) -> Experiment:
    """An experiment from its file's mapping (`path` names it in errors, and preset paths are
    found beside it)."""
    data = dict(data)
    unknown = set(data) - KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; expected {sorted(KEYS)}")
    quick_part = data.pop("quick", {}) or {}
    full_budget = data.get("budget")
    if quick:
        chosen = quick_part.get("methods")
        data = {**data, **{k: v for k, v in quick_part.items() if k not in ("methods", "set")}}
        data["set"] = [*data.get("set", []), *quick_part.get("set", [])]
        if chosen is not None:
            missing = set(chosen) - set(data["methods"])
            if missing:
                raise ConfigError(f"quick.methods: {sorted(missing)} are not among methods")
            data["methods"] = {k: v for k, v in data["methods"].items() if k in chosen}
    methods = []
    for name, spec in (data.get("methods") or {}).items():
        if not isinstance(spec, dict) or "config" not in spec:
            raise ConfigError(
                f"methods.{name}: expected a mapping with 'config' (and optional 'set', 'backend')"
            )
        unknown_spec = set(spec) - METHOD_KEYS
        if unknown_spec:
            raise ConfigError(
                f"methods.{name}: unknown key(s) {sorted(unknown_spec)}; "
                f"expected {', '.join(sorted(METHOD_KEYS))}"
            )
        backend = str(spec.get("backend", "native"))
        if backend not in BACKENDS:
            raise ConfigError(f"methods.{name}.backend = {backend!r}: choose one of {BACKENDS}")
        own_seeds = spec.get("seeds")
        if own_seeds is not None:
            _check_seeds(f"methods.{name}.seeds", own_seeds)
            if quick:  # a quick run keeps the quick section's seeds for every method
                own_seeds = None
        own_budget = spec.get("budget")
        if own_budget is not None:
            _check_positive(f"methods.{name}.budget", own_budget)
        methods.append(
            Method(
                str(name),
                _config_of(spec["config"], path.parent, f"methods.{name}.config"),
                tuple(spec.get("set", [])),
                backend,
                None if own_seeds is None else tuple(own_seeds),
                None if own_budget is None else float(own_budget),
                None if spec.get("extends") is None else str(spec["extends"]),
            )
        )
    if not methods:
        raise ConfigError(f"{path}: methods: at least one method")
    for key in ("budget", "eval_every"):
        _check_positive(key, data.get(key))
    if quick and any(m.budget is not None for m in methods):  # shrink with the experiment's
        scale = float(data["budget"]) / _check_positive("budget", full_budget)
        methods = [m if m.budget is None else replace(m, budget=m.budget * scale) for m in methods]
    seeds = data.get("seeds", [0])
    _check_seeds("seeds", seeds)
    baseline = data.get("baseline", methods[0].name)
    if baseline not in {m.name for m in methods}:
        raise ConfigError(f"baseline = {baseline!r}: not among the methods")
    unpaired = _unpaired(methods, seeds, baseline)
    if unpaired:
        name, unpaired_seeds = unpaired
        raise ConfigError(
            f"methods.{name}.seeds: {unpaired_seeds} not among the baseline's seeds "
            "(seeds are paired with the baseline's)"
        )
    archive = data.get("archive")
    if archive is not None and not isinstance(archive, str):
        raise ConfigError(f"archive = {archive!r}: must be a directory path")
    _check_extensions(methods, seeds, float(data["budget"]))
    return Experiment(
        name=str(data.get("name", path.stem)),
        out=Path(out or data.get("out", f"runs/{path.stem}")) / ("quick" if quick else "full"),
        methods=tuple(methods),
        seeds=tuple(seeds),
        budget=float(data["budget"]),
        eval_every=float(data["eval_every"]),
        baseline=baseline,
        budget_basis=str(data.get("budget_basis", "measured")),
        bases=tuple(data.get("bases", ("measured", "mu_5", "rollouts"))),
        mu_curve=tuple(float(m) for m in data.get("mu_curve", (0.5, 1, 2, 5, 10))),
        overrides=tuple(data.get("set", [])),
        archive=None if archive is None or quick else Path(archive),
    )


def with_baseline(experiment: Experiment, name: str) -> Experiment:
    """The experiment read against another of its methods (e.g. a baseline run to a larger
    budget, whose final accuracy is a plateau target); every method's seeds must be among its.
    `llm-replay report --baseline` writes that reading to `OUT/against_NAME/`."""
    names = [m.name for m in experiment.methods]
    if name not in names:
        raise ConfigError(f"baseline = {name!r}: not among the methods {names}")
    unpaired = _unpaired(list(experiment.methods), list(experiment.seeds), name)
    if unpaired:
        method, missing = unpaired
        raise ConfigError(
            f"baseline = {name!r}: methods.{method} has seeds {missing} it has not run "
            "(seeds are paired with the baseline's)"
        )
    return replace(experiment, baseline=name)


def _unpaired(
    methods: list[Method], seeds: list[int], baseline: str
) -> tuple[str, list[int]] | None:
    """The first method with seeds the baseline does not run, and those seeds."""
    own = set(next(m for m in methods if m.name == baseline).seeds or seeds)
    for m in methods:
        missing = sorted(set(m.seeds or seeds) - own)
        if missing:
            return m.name, missing
    return None


def _check_positive(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{key} = {value!r}: must be a number > 0")
    return float(value)


def _check_extensions(methods: list[Method], seeds: list[int], budget: float) -> None:
    """`extends: OTHER` needs OTHER to be a plain method with the same preset, overrides and
    backend, a budget no larger, and every seed this one runs."""
    by_name = {m.name: m for m in methods}
    for m in methods:
        if m.extends is None:
            continue
        key = f"methods.{m.name}.extends"
        base = by_name.get(m.extends)
        if base is None or base is m:
            raise ConfigError(f"{key} = {m.extends!r}: must name another method")
        if base.extends is not None:
            raise ConfigError(f"{key} = {m.extends!r}: which extends another method itself")
        if (base.config, base.overrides, base.backend) != (m.config, m.overrides, m.backend):
            raise ConfigError(
                f"{key} = {m.extends!r}: config, set and backend must be {base.name}'s "
                "(only the budget differs)"
            )
        if m.backend != "native":
            raise ConfigError(f"{key}: only backend 'native' runs resume from checkpoints")
        own, theirs = m.budget or budget, base.budget or budget
        if own < theirs:
            raise ConfigError(f"{key}: budget {own:g} is below {base.name}'s {theirs:g}")
        missing = sorted(set(m.seeds or seeds) - set(base.seeds or seeds))
        if missing:
            raise ConfigError(f"{key}: seeds {missing} are not among {base.name}'s")


def _check_seeds(key: str, seeds: Any) -> None:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"{key} = {seeds!r}: must be a non-empty list of integers")


def _config_of(text: Any, beside: Path, key: str) -> str:
    """A method's `config:`: a preset's name as written, or the file beside the experiment."""
    found = find_config(str(text), beside, what=key)
    return str(text) if preset_path(str(text)) == found else str(found)


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


def parse_part(text: str) -> tuple[int, int]:
    """`I/N` (1 <= I <= N) as (I, N): the I-th of N disjoint shares of an experiment's runs."""
    index, _, count = str(text).partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ConfigError(f"--part = {text!r}: expected I/N, e.g. 1/2") from None
    if n < 1 or not 1 <= i <= n:
        raise ConfigError(f"--part = {text!r}: need 1 <= I <= N")
    return i, n


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
    from llm_replay.cli.progress import console

    i, n = part
    planned = planned_runs(experiment, only)
    selected = planned[i - 1 :: n] if runs is None else list(runs)
    configs = [(m, s, run_config(experiment, m, s)) for m, s in selected]
    if experiment.archive is not None:  # refuse a stale archive before anything runs
        for method, seed, config in configs:
            _restore(experiment.archive, config.run_dir, method.name, seed, config)
    for index, (method, seed, config) in enumerate(configs, start=1):
        if (config.run_dir / SUMMARY_FILE).is_file():
            log.info("%s seed %d: done before, skipped", method.name, seed)
            if experiment.archive is not None:
                archive_run(
                    config.run_dir, experiment.archive, method.name, seed, protocol_of(config)
                )
            continue
        share = f" (part {i}/{n} of {len(planned)})" if n > 1 else ""
        console.rule(f"[bold]{index}/{len(configs)}[/]{share} {method.name} · seed {seed}")
        _run(experiment, method, seed, config, progress)
        if experiment.archive is not None:
            archive_run(config.run_dir, experiment.archive, method.name, seed, protocol_of(config))
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
    unknown = sorted(set(only) - {m.name for m in experiment.methods})
    if unknown or not only:
        raise ConfigError(
            f"methods = {sorted(only)}: name one or more of {[m.name for m in experiment.methods]}"
        )
    return [(m, s) for m, s in planned if m.name in only]


def _run(experiment: Experiment, method: Method, seed: int, config: Any, progress: bool) -> None:
    from llm_replay.cli.progress import run_training

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
    (a run may be resumed on another machine), in its JSON form."""
    tree = {k: v for k, v in config.to_dict().items() if k != "log"}
    tree["model"] = {k: v for k, v in tree.get("model", {}).items() if k != "device"}
    return dict(json.loads(json.dumps(tree, default=str)))


def _restore(archive: Path, run_dir: Path, method: str, seed: int, config: Any) -> None:
    try:
        restore_run(archive, run_dir, method, seed, protocol_of(config))
    except ArchiveMismatch as error:
        raise ConfigError(f"archive: {error}") from None


def summarise(experiment: Experiment, dest: Path | None = None) -> dict[str, Any]:
    """Compare what has finished; write `summary.json` and the plots to `dest` (default: the
    experiment's `out`)."""
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
    return summary
