"""`ReplayHost`: the one object that owns a replay method inside any trainer.

A method used to be hosted by hand in each front end, and the copies drifted (issue #39): the
`MethodContext` was built in three places, the refusal of a method that restarts from the base
model was written twice, the staged save twice. The host is where all of that lives, so a front
end (our sync, threaded and Ray runtimes, `ReplayGRPOTrainer`, verl's `ReplaySampler`) only feeds
it:

- **building**: `ReplayHost.build(method, settings, options, shape)` makes the context from the
  run's shape (`RunShape`: rows a gradient step, fresh rollouts a round, group size, seed,
  advantage estimator) and the pipeline (`ReplayPipeline`: the method and its options), started
  from another run's table where `init_from` says;
- **capabilities**, asked instead of method names: whether it replays stored rows (and so needs
  the behaviour log-probs and an off-policy correction), whether it follows the run's length
  (the anneal schedule), whether it decides from the measured μ (`compute_optimal` without a
  given `mu`), whether it restarts from the base model (`refuse_restarts` says so in the front
  end's words);
- **per round and per step**: `round(fresh, policy_version=, mu=, progress=)` sets the signals
  and yields the round's batches; `after_step(sample, metrics, policy_version)` records the
  learner's statistics;
- **save and load** through `buffer.checkpoint.atomic_directory`, with the front end's own state
  beside the pipeline's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.buffer import ReplayTable, Sample
from llm_replay.buffer.checkpoint import atomic_directory
from llm_replay.buffer.task_parts import TaskParts
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import MethodConfig, MethodContext, OptionConfig
from llm_replay.methods.pipeline import ReplayPipeline
from llm_replay.methods.registry import OPTIONS, method_class

HOST_FILE = "host.json"


@dataclass(frozen=True)
class RunShape:
    """What a method needs to know of the trainer hosting it."""

    batch_size: int  # rows a gradient step
    rollouts_per_step: int  # fresh rollouts a round
    group_size: int
    seed: int = 0
    advantage: str = "grpo"
    tasks: TaskParts | None = None  # per-task table parts (`replay.tasks`)

    def context(self) -> MethodContext:
        return MethodContext(
            batch_size=self.batch_size,
            rollouts_per_step=self.rollouts_per_step,
            group_size=self.group_size,
            seed=self.seed,
            advantage=self.advantage,
            tasks=self.tasks,
        )


def replays_stored_rows(method: str, options: Mapping[str, OptionConfig] | None = None) -> bool:
    """Whether a method with these options may train on a row after the weights that generated
    it changed: the method keeps rows (every method but on-policy) or an option turned on does
    (zero-variance replacement). Such a front end needs the behaviour log-probs and an
    off-policy correction. Answered from the registry, before anything is built."""
    if not method_class(method).consumes_rollouts:
        return True
    return any(OPTIONS[name].stores_rows for name, o in (options or {}).items() if o.enabled)


def reads_behaviour(
    method: str,
    options: Mapping[str, OptionConfig] | None = None,
    *,
    ratio: bool,
    control: bool = False,
    carries_rows: bool = False,
) -> bool:
    """Whether training reads a row's behaviour log-probs, so a front end must keep them (and may
    skip computing them where not): a token control that reads them (`control`: KL-Cov's term),
    or a loss with a ratio against the generating policy (`ratio`; AsymRE has none) trained on a
    row after the weights moved: a stored row (`replays_stored_rows`) or a fresh one the front
    end carries past a gradient step (`carries_rows`: adaptive rounds that are not a multiple of
    the batch). The one rule every front end asks."""
    if control:
        return True
    return ratio and (carries_rows or replays_stored_rows(method, options))


def reads_measured_mu(method: str, settings: MethodConfig) -> bool:
    """Whether `method` with `settings` decides from the run's measured μ (answered from the
    registry, before anything is built)."""
    return method_class(method).reads_measured_mu(settings)


def needs_reward_model(options: Mapping[str, OptionConfig] | None = None) -> list[str]:
    """`option.setting` for each enabled option set to re-score stored rows with the run's
    reward model (`stale_rewards.policy = 'rescore'`)."""
    found = ((n, OPTIONS[n].needs_reward_model(o)) for n, o in (options or {}).items() if o.enabled)
    return [f"{name}.{setting}" for name, setting in found if setting is not None]


def follows_progress(options: Mapping[str, OptionConfig] | None = None) -> bool:
    """Whether an option turned on needs the run's length (the anneal schedule, as in `auto`)."""
    return any(OPTIONS[name].needs_progress(o) for name, o in (options or {}).items() if o.enabled)


ZERO_BEHAVIOUR_TOKENS = 64
"""A table whose stored behaviour log-probs are all exactly 0 over at least this many tokens was
written by a run that stored none (TRL's shortcut, `integrations.trl.rounds.behaviour_or_zeros`):
sampled tokens that all had probability 1 in float32 do not happen at this count."""


def refuse_zero_behaviour(source: ReplayTable, setting: str) -> None:
    """Refuse rows stored without behaviour log-probs for a run that reads them (KL-Cov's term,
    a ratio): their zeros would read as a behaviour policy that was certain of every token."""
    rows, _ = source.get_batch(source.storage.keys_of(source.storage.live_in_order()))
    logprobs = np.asarray(rows.behaviour_logprobs)
    if logprobs.size >= ZERO_BEHAVIOUR_TOKENS and not np.any(logprobs):
        raise ValueError(
            f"{setting}: every stored behaviour log-prob is 0 ({logprobs.size} tokens): the run "
            "that wrote the table stored none (AsymRE without KL-Cov, or the on-policy queue, "
            "never reads them), and this run reads them; start from a table written with "
            "behaviour log-probs"
        )


class ReplayHost:
    """A method with its options, context and signals, as every front end hosts it."""

    def __init__(self, pipeline: ReplayPipeline, options: Mapping[str, OptionConfig]) -> None:
        self.pipeline = pipeline
        self.option_settings = dict(options)

    @classmethod
    def build(
        cls,
        method: str,
        settings: MethodConfig,
        options: Mapping[str, OptionConfig] | None,
        shape: RunShape,
        *,
        init_from: str | Path | None = None,
        reads_behaviour: bool = True,
    ) -> ReplayHost:
        options = dict(options or {})
        host = cls(ReplayPipeline.build(method, settings, shape.context(), options), options)
        if init_from is not None:
            host.preload(init_from, "replay.init_from", reads_behaviour=reads_behaviour)
        return host

    def preload(self, path: str | Path, setting: str, *, reads_behaviour: bool) -> None:
        """Start from the table at `path` (`setting` names it in a refusal): one stored without
        behaviour log-probs is refused where training reads them."""
        source = ReplayTable.read(path)
        if reads_behaviour:
            refuse_zero_behaviour(source, f"{setting} = {str(path)!r}")
        self.pipeline.preload(source)

    @property
    def name(self) -> str:
        return self.pipeline.name

    @property
    def signals(self) -> Any:
        return self.pipeline.signals

    @property
    def context(self) -> MethodContext:
        return self.pipeline.method.context

    @property
    def method(self) -> Any:
        """The method itself (a front end that wires services into its context reads it)."""
        return self.pipeline.method

    # ---------------------------------------------------------------- capabilities
    @property
    def replays_stored_rows(self) -> bool:
        """Some row may be trained on after the weights that generated it changed (see the
        module-level `replays_stored_rows`)."""
        return replays_stored_rows(self.name, self.option_settings)

    def reads_behaviour(
        self, *, ratio: bool, control: bool = False, carries_rows: bool = False
    ) -> bool:
        """The module-level `reads_behaviour` for this host's method and options."""
        return reads_behaviour(
            self.name, self.option_settings, ratio=ratio, control=control, carries_rows=carries_rows
        )

    @property
    def follows_progress(self) -> bool:
        """An option needs the run's length (the anneal schedule, as in `auto` and `positive_schedule`)."""
        return follows_progress(self.option_settings)

    @property
    def reads_measured_mu(self) -> bool:
        """The method decides from the run's measured μ, which the front end must measure
        (`compute_optimal` without a given `mu`)."""
        method = self.pipeline.method
        return method.reads_measured_mu(method.settings)

    @property
    def restarts(self) -> bool:
        return bool(self.pipeline.method.restarts)

    def refuse_restarts(self, field: str, value: str, why: str) -> None:
        """ValueError naming `field` if the method restarts from the base model between phases,
        which a trainer that does not restart cannot host; `why` says so in its words."""
        if self.restarts:
            raise ValueError(
                f"{field} = {value!r}: this method restarts from the base model between phases, "
                f"which {why}"
            )

    # ---------------------------------------------------------------- per round and per step
    def round(
        self,
        fresh: RolloutBatch,
        *,
        policy_version: int | None = None,
        mu: float | None = None,
        progress: float | None = None,
    ) -> Iterator[Sample]:
        """The signals the front end measured, then the round's batches."""
        if policy_version is not None:
            self.pipeline.set_policy_version(policy_version)
        self.set_run(mu=mu, progress=progress)
        return self.pipeline.batches(fresh)

    def set_run(self, *, mu: float | None, progress: float | None) -> None:
        """The run's measured μ and budget progress (None: not known to this front end)."""
        self.signals.set_mu(mu)
        self.signals.set_progress(progress)

    def after_step(
        self, sample: Sample, metrics: Mapping[str, float], policy_version: int | None = None
    ) -> None:
        """The learner took a step on `sample` with these statistics (our learner's names,
        `methods.signals.STEP_KEYS`); then the policy is at `policy_version`, where given."""
        self.pipeline.observe_step(sample, metrics)
        if policy_version is not None:
            self.pipeline.set_policy_version(policy_version)

    def set_policy_version(self, version: int) -> None:
        self.pipeline.set_policy_version(version)

    def stored_groups(self) -> set[int]:
        """The group ids some table of the method holds a row of (a front end that keeps the
        trainer's own fields of each row drops the rest)."""
        groups: set[int] = set()
        for part in self.pipeline.parts():
            for table in part.stored_tables():
                storage = table.storage
                groups.update(int(g) for g in storage.group_id[storage.live_slots()])
        return groups

    def restart_due(self) -> bool:
        """The method asks its trainer to restart from the base model now (RLEP)."""
        return self.pipeline.restart_due()

    def metrics(self) -> dict[str, float]:
        return self.pipeline.metrics()

    # ---------------------------------------------------------------- save and load
    def save_state(self, directory: Path) -> None:
        """The pipeline's state into `directory`, for a front end whose own checkpoint is
        already written atomically (our runtimes)."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.pipeline.save(Path(directory))

    def load_state(self, directory: Path) -> None:
        self.pipeline.load(Path(directory))

    def save(
        self,
        target: Path,
        state: Mapping[str, Any],
        *,
        pipeline_dir: str = ".",
        state_file: str = HOST_FILE,
        also: Callable[[Path], None] | None = None,
    ) -> None:
        """The pipeline under `target/pipeline_dir`, the front end's `state` as JSON beside it and
        whatever `also` writes, all appearing at `target` at once (a crash leaves the previous
        save in place)."""
        with atomic_directory(Path(target)) as staging:
            where = staging / pipeline_dir
            where.mkdir(parents=True, exist_ok=True)
            self.pipeline.save(where)
            (staging / state_file).write_text(json.dumps({"method": self.name, **state}))
            if also is not None:
                also(staging)

    def load(
        self, source: Path, *, pipeline_dir: str = ".", state_file: str = HOST_FILE
    ) -> dict[str, Any]:
        """The front end's state saved with the pipeline, after loading the pipeline."""
        path = Path(source) / state_file
        if not path.is_file():
            raise FileNotFoundError(f"{source}: no {state_file} (not a saved replay host)")
        state: dict[str, Any] = json.loads(path.read_text())
        saved = state.get("method", self.name)
        if saved != self.name:
            raise ValueError(f"{source}: saved by method {saved!r}, not {self.name!r}")
        self.pipeline.load(Path(source) / pipeline_dir)
        return state
