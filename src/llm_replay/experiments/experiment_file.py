"""Experiment files: what `llm-replay compare` runs, read and checked before anything trains.

An experiment names its methods (a preset plus overrides each), seeds, a budget on a compute
basis, how often to evaluate, the baseline and the bases to report (`llm_replay.experiments.compare`
says how they run). Every mistake is a `ConfigError` naming its key, raised at load time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llm_replay.config import ConfigError, load_config
from llm_replay.config.files import find_config, preset_path, read_mapping
from llm_replay.config.parse import did_you_mean
from llm_replay.experiments.sweep_knobs import PLAYBOOK_NAME, playbook_members

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
    # on-policy tuned one knob at a time, the baseline first (issue #53, `envelope.py`); () = none
    baseline_sweep: tuple[str, ...] = ()

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
    "baseline_sweep",
}


def read_experiment_file(path: str | Path) -> dict[str, Any]:
    """An experiment (or suite) file's top-level mapping."""
    return read_mapping(Path(path), what="experiment")


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
    unknown = sorted(set(data) - KEYS, key=str)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {unknown}; expected {sorted(KEYS)}"
            + did_you_mean(unknown[0], KEYS)
        )
    quick_part = data.pop("quick", {}) or {}
    declared = list(data.get("methods") or {})  # before `quick` chooses among them
    full_budget = data.get("budget")
    if quick:
        chosen = quick_part.get("methods")
        data = {**data, **{k: v for k, v in quick_part.items() if k not in ("methods", "set")}}
        data["set"] = [*data.get("set", []), *quick_part.get("set", [])]
        if chosen is not None:
            missing = sorted(set(chosen) - set(data["methods"]), key=str)
            if missing:
                raise ConfigError(
                    f"quick.methods: {missing} are not among methods"
                    + did_you_mean(missing[0], data["methods"])
                )
            data["methods"] = {k: v for k, v in data["methods"].items() if k in chosen}
    methods = []
    for name, spec in (data.get("methods") or {}).items():
        if not isinstance(spec, dict) or "config" not in spec:
            raise ConfigError(
                f"methods.{name}: expected a mapping with 'config' (and optional 'set', 'backend')"
            )
        unknown_spec = sorted(set(spec) - METHOD_KEYS, key=str)
        if unknown_spec:
            raise ConfigError(
                f"methods.{name}: unknown key(s) {unknown_spec}; "
                f"expected {', '.join(sorted(METHOD_KEYS))}"
                + did_you_mean(unknown_spec[0], METHOD_KEYS, prefix=f"methods.{name}.")
            )
        backend = str(spec.get("backend", "native"))
        if backend not in BACKENDS:
            raise ConfigError(
                f"methods.{name}.backend = {backend!r}: choose one of {BACKENDS}"
                + did_you_mean(backend, BACKENDS)
            )
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
    names = [m.name for m in methods]
    if baseline not in names:
        raise ConfigError(
            f"baseline = {baseline!r}: not among the methods" + did_you_mean(baseline, names)
        )
    if _names_playbook(data.get("baseline_sweep")):
        members = _playbook(methods, baseline, list(data.get("set", [])))
        declared += [m.name for m in members if m.name not in declared]
        if not (quick and quick_part.get("methods") is not None):  # quick.methods: only those
            methods += [m for m in members if m.name not in names]
        data["baseline_sweep"] = _expanded(data["baseline_sweep"], [m.name for m in members])
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
        baseline_sweep=_baseline_sweep(data, declared, methods, seeds, baseline),
    )


def with_baseline(experiment: Experiment, name: str) -> Experiment:
    """The experiment read against another of its methods (e.g. a baseline run to a larger
    budget, whose final accuracy is a plateau target); every method's seeds must be among its.
    `llm-replay report --baseline` writes that reading to `OUT/against_NAME/`."""
    names = [m.name for m in experiment.methods]
    if name not in names:
        raise ConfigError(
            f"baseline = {name!r}: not among the methods {names}" + did_you_mean(name, names)
        )
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


def _names_playbook(listed: Any) -> bool:
    return listed == PLAYBOOK_NAME or (isinstance(listed, list) and PLAYBOOK_NAME in listed)


def _expanded(listed: Any, members: list[str]) -> list[Any]:
    """The sweep's names with `playbook` replaced by the playbook's members."""
    names = [listed] if isinstance(listed, str) else list(listed)
    return [n for entry in names for n in (members if entry == PLAYBOOK_NAME else [entry])]


def _playbook(methods: list[Method], baseline: str, experiment_set: list[str]) -> list[Method]:
    """The playbook's members around the baseline as it runs (its preset, the experiment's
    settings, then its own), each a method like any other (`sweep_knobs.playbook_members`)."""
    base = next(m for m in methods if m.name == baseline)
    try:
        config = load_config(base.config, [*experiment_set, *base.overrides])
    except ConfigError as error:
        raise ConfigError(f"baseline_sweep: playbook: methods.{baseline}: {error}") from None
    members = []
    for name, sets in playbook_members(baseline, config).items():
        try:  # a move the baseline's other settings refuse (a group its stages do not divide)
            load_config(base.config, [*experiment_set, *base.overrides, *sets])
        except ConfigError as error:
            log.warning("baseline_sweep: playbook: %s left out (%s)", name, error)
            continue
        members.append(replace(base, name=name, overrides=(*base.overrides, *sets), extends=None))
    return members


def _baseline_sweep(
    data: dict[str, Any],
    declared: list[str],
    methods: list[Method],
    seeds: list[int],
    baseline: str,
) -> tuple[str, ...]:
    """`baseline_sweep:`, the methods that are on-policy tuned one knob at a time, as read against
    (issue #53, `envelope.py`): the baseline first, then each listed member that runs (a quick run
    may leave some out); every member runs every seed the baseline does. () without the key."""
    listed = data.get("baseline_sweep")
    if listed is None:
        return ()
    if not isinstance(listed, list) or not listed or not all(isinstance(n, str) for n in listed):
        raise ConfigError(
            f"baseline_sweep = {listed!r}: must be a non-empty list of method names, or "
            f"{PLAYBOOK_NAME!r}"
            + (did_you_mean(listed, [PLAYBOOK_NAME]) if isinstance(listed, str) else "")
        )
    for name in listed:
        if name not in declared:
            raise ConfigError(
                f"baseline_sweep: {name!r} is not among the methods" + did_you_mean(name, declared)
            )
    by_name = {m.name: m for m in methods}
    base = set(by_name[baseline].seeds or seeds)
    for name in listed:
        missing = sorted(base - set(by_name[name].seeds or seeds)) if name in by_name else []
        if missing:
            raise ConfigError(
                f"baseline_sweep: methods.{name} does not run the baseline's seed(s) {missing} "
                "(the envelope is read seed by seed)"
            )
    return tuple(n for n in dict.fromkeys([baseline, *listed]) if n in by_name)


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
            others = [n for n in by_name if n != m.name]
            raise ConfigError(
                f"{key} = {m.extends!r}: must name another method" + did_you_mean(m.extends, others)
            )
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
