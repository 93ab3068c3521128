"""What a replay method is, for every front end that drives one.

A `ReplayMethod` is a table spec plus a composer. `table_spec(settings, context)` says what its
table is (`methods.table_spec`), so whoever hosts the table builds it once: the method on first
use of `self.table`, or an asynchronous runtime / Ray shard from the config alone. `batches`
turns the fresh rollouts of one generation round into the `Sample`s trained on (a lazy
iterator, so the caller can take a gradient step and advance the policy version between two
draws). Its knobs are one config dataclass, validated by the config loader under
`replay.<knob>`; the class is generic in it, so `self.settings` is typed. The sync loop, the
threaded and Ray runtimes and the TRL trainer all drive a method through this interface and
nothing else:

- `batches(fresh)` once per round, a gradient step per yielded sample, `observe_step(sample,
  metrics)` with the learner's metrics for it and `set_policy_version` after each step;
- the run's signals (μ, learner statistics, fresh rounds) through `context.signals`, fed by the
  front end (`methods.signals`), never patched in;
- `restart_due()` after a round (RLEP restarts from the base model);
- `metrics()`, `save(dir)` / `load(dir)` for logs and checkpoints.

How a method runs asynchronously is declared by the method (`async_batches`): "table" for a
method whose batches are the plain credit-based draws of `TableReplay`, a table that generation
workers fill and the learner samples, rate-limited at its samples-per-insert; "rounds" for one
that needs each round of fresh groups, so workers deliver rounds to an intake queue and the
learner composes batches from them. "table" skips the method's `batches`, so a method that
declares it and overrides `batches` is refused when its class is defined (it used to be inferred
from that override, which silently switched modes). A method that cannot run asynchronously says
why in `async_refusal`.

A `MethodOption` is something any method it applies to can turn on (`replay.<option>.enabled:
true`): a transform of each fresh round (`prepare`), of each sample trained on (`adjust`), or a
controller of the method itself through its public hooks (`bind` gives it the method; a method
that can move toward on-policy says so with `scales_replay` and `set_replay_scale`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar, cast

import numpy as np

from llm_replay import checks
from llm_replay.buffer import ReplayTable, Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.context import MethodContext as MethodContext
from llm_replay.methods.context import RunServices as RunServices
from llm_replay.methods.context import StoredRewards as StoredRewards
from llm_replay.methods.context import queue_spec as queue_spec
from llm_replay.methods.table_spec import TableSpec

TABLE_DIR = "table"
STATE_FILE = "method.json"
AsyncMode = Literal["table", "rounds"]


class MethodConfigError(ValueError):
    """A method knob is out of range; the message starts with the knob's name."""


def positive(name: str, value: float, *, zero_ok: bool = False) -> None:
    checks.positive(name, value, zero_ok=zero_ok, error=MethodConfigError)


def knob(default: Any, help: str) -> Any:
    """A config field with the one-line help `llm-replay methods` prints."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class MethodConfig:
    """Base of every method's knobs."""

    def check(self) -> None:
        """Raise `MethodConfigError` naming the knob; called by the config loader."""

    @property
    def samples_per_insert(self) -> float:
        """Rollouts drawn per rollout added (y); 1 for methods that use each rollout once."""
        return 1.0


SettingsT = TypeVar("SettingsT", bound=MethodConfig)


class ReplayMethod(ABC, Generic[SettingsT]):
    """Base of every replay method (see the module docstring); generic in its knobs' class, so a
    method reads `self.settings` typed, with no narrowing."""

    name: ClassVar[str]
    description: ClassVar[str]
    paper: ClassVar[str]
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    async_batches: ClassVar[AsyncMode] = "rounds"  # how it runs asynchronously (module docstring)
    consumes_rollouts: ClassVar[bool] = False  # every rollout is trained on exactly once
    restarts: bool = False  # may ask the caller to restart from the base model (`restart_due`)
    trains_fresh_groups: ClassVar[bool] = False  # a round's fresh groups are its batches
    scales_replay: ClassVar[bool] = False  # `set_replay_scale` moves it toward on-policy
    credit_steps: ClassVar[bool] = False  # a round trains y·R/B steps, the rest carried over
    ratio_floor: ClassVar[float | None] = None  # the least y it may choose; None: y as set

    def __init__(self, settings: MethodConfig, context: MethodContext) -> None:
        if not isinstance(settings, self.Config):
            raise TypeError(f"settings = {settings!r}: expected {self.Config.__name__}")
        self.settings: SettingsT = cast(SettingsT, settings)
        self.context = context
        self._table: ReplayTable | None = None

    @classmethod
    @abstractmethod
    def table_spec(cls, settings: Any, context: MethodContext) -> TableSpec:
        """What this method's table is (`methods.table_spec`); `settings` is its `Config`."""

    @classmethod
    def resolved_spec(cls, settings: Any, context: MethodContext) -> TableSpec:
        """`table_spec` with the run's per-task table parts (`context.tasks`): the spec every
        host builds. A method that trains each rollout once keeps its queue as it is."""
        spec = cls.table_spec(settings, context)
        if context.tasks is None or not context.tasks.active or cls.consumes_rollouts:
            return spec
        return dataclasses.replace(spec, tasks=context.tasks)

    @property
    def spec(self) -> TableSpec:
        return self.resolved_spec(self.settings, self.context)

    @property
    def table(self) -> ReplayTable:
        """The method's own table, built from its spec on first use (an asynchronous run whose
        workers fill a table of this spec never builds this one)."""
        if self._table is None:
            self._table = self.spec.build()
        return self._table

    @table.setter
    def table(self, table: ReplayTable) -> None:
        self._table = table

    @abstractmethod
    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        """The samples to train on for one round of fresh rollouts."""

    # ------------------------------------------------------------------ asynchronous runs
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table = globals().get("TableReplay")  # None while TableReplay itself is being defined
        if cls.async_batches == "table" and table is not None and cls.batches is not table.batches:
            raise TypeError(
                f"{cls.__name__}: async_batches = 'table' skips batches(), which it overrides; "
                "declare async_batches = 'rounds'"
            )

    @classmethod
    def reads_measured_mu(cls, settings: Any) -> bool:
        """Whether, with `settings`, the method decides from the run's measured μ
        (`signals.mu`), which a front end must then measure."""
        return False

    @classmethod
    def async_mode(cls) -> AsyncMode:
        return cls.async_batches

    @classmethod
    def async_refusal(cls, settings: MethodConfig) -> str | None:
        """Why this method cannot run asynchronously with `settings`, or None if it can."""
        return None

    @classmethod
    def async_note(cls, settings: MethodConfig) -> str:
        if cls.async_mode() == "table":
            return "workers fill the table; the learner samples it at the replay ratio"
        return "workers deliver rounds of fresh groups; the learner composes each round's batches"

    # ------------------------------------------------------------------ reuse across runs
    preload_refusal: ClassVar[str | None] = None  # why `replay.init_from` cannot feed it

    def preload(self, rollouts: RolloutBatch) -> None:
        """Start from another run's stored rollouts (`replay.init_from`): into the table as if
        inserted; methods that keep more than a table override this."""
        self.table.insert(rollouts)

    # ------------------------------------------------------------------ the loop's hooks
    def observe_step(self, sample: Sample, metrics: Mapping[str, float]) -> None:
        """The learner took a step on `sample` (one this method yielded) with these metrics."""

    def set_policy_version(self, version: int) -> None:
        self.table.set_policy_version(version)

    def restart_due(self) -> bool:
        """True when the caller must restart the policy from the base model now."""
        return False

    def set_replay_scale(self, scale: float) -> None:
        """Move toward on-policy: at `scale` = 1 the method replays as configured, at 0 it trains
        on each fresh rollout once (methods with `scales_replay`; a replay controller calls it
        before each round)."""
        raise TypeError(f"method {self.name!r} has no replay scale")

    def set_step_rows(self, rows: int) -> None:
        """Rows a gradient step from the next round on (methods whose steps follow a credit of
        rows, `TableReplay`; a controller that hands the run to on-policy may resize them)."""
        raise TypeError(f"method {self.name!r} does not size its steps by a credit of rows")

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.table.stats().metrics().items()}

    def stored_tables(self) -> list[ReplayTable]:
        """Every table the method keeps rollouts in and may replay from (a host that keeps each
        stored rollout's payload of its own, as verl's sampler does, drops the payloads of rows
        no longer in any of them)."""
        return [] if self._table is None else [self._table]

    def state(self) -> dict[str, Any]:
        """JSON-serialisable state beside the table(s)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore `state()`."""

    def save(self, directory: Path) -> None:
        self.table.save(directory / TABLE_DIR)
        (directory / STATE_FILE).write_text(json.dumps({"method": self.name, **self.state()}))

    def load(self, directory: Path) -> None:
        state = json.loads((directory / STATE_FILE).read_text())
        if state.get("method") != self.name:
            raise ValueError(
                f"{directory}: saved by method {state.get('method')!r}, not {self.name!r}"
            )
        self.table = ReplayTable.load(directory / TABLE_DIR)
        self.load_state(state)


@dataclass
class TableKnobs(MethodConfig):
    capacity: int = knob(1024, "rollouts kept (N); the oldest leave first")
    max_age: int | None = knob(None, "evict rollouts older than this many learner steps")

    def check(self) -> None:
        positive("capacity", self.capacity)
        if self.max_age is not None:
            positive("max_age", self.max_age)


@dataclass
class RatioKnobs(TableKnobs):
    replay_ratio: float = knob(1.0, "y: rollouts drawn per rollout added (y·R/B steps per round)")

    def check(self) -> None:
        super().check()
        positive("replay_ratio", self.replay_ratio)

    @property
    def samples_per_insert(self) -> float:
        return self.replay_ratio


class TableReplay(ReplayMethod[SettingsT]):
    """Insert the round, then draw `batch_size` rollouts for every `batch_size` of credit; the
    credit grows by y per rollout added, so fractional steps carry over between rounds.

    Below a replay scale of 1 (`set_replay_scale`, a controller moving toward on-policy) y
    becomes 1 + scale·(y − 1) and each batch is anchored on the fresh round: round((1 − scale)·B)
    of its rows are this round's rollouts, in order, each once, and the rest are drawn from the
    table. At scale 0 that is on-policy training exactly; at 1 it is the draw above, unchanged.

    At scale 0 a round whose size is not a multiple of B (adaptive rollouts' rounds vary) leaves
    its last rows untrained when the credit runs out; they are carried (by key, `carry`) to the
    front of the next round's anchored rows, so every fresh rollout is trained once, in
    generation order, and no batch is topped up from the table. Before, those batches were
    filled with table draws, and `auto` trained 4-7% replayed rows after its anneal had ended
    (issue #53). Rows the table no longer holds are dropped from the carry (there is nothing
    left to train them from). Above scale 0 nothing is carried: the anchored share of each batch
    is below the fresh round's size by design, and the rest of the round stays drawable.

    B is `train.batch_size` unless a controller resizes the step (`set_step_rows`: the anneal's
    `on_policy_batch_size`); the credit is in rows, so it carries over a change of B.
    """

    async_batches: ClassVar[AsyncMode] = "table"
    scales_replay: ClassVar[bool] = True
    credit_steps: ClassVar[bool] = True

    def __init__(self, settings: MethodConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        self.credit = 0.0
        self.replay_scale = 1.0
        self.carry: np.ndarray = np.zeros(0, dtype=np.int64)  # keys of untrained fresh rows
        self.step_rows = context.batch_size  # rows a gradient step (`set_step_rows`)

    @property
    def replay_ratio(self) -> float:
        """y, scaled toward 1 (each rollout once) by the replay scale: 1 + scale·(y − 1)."""
        return 1.0 + self.replay_scale * (self.settings.samples_per_insert - 1.0)

    def set_replay_scale(self, scale: float) -> None:
        if not (math.isfinite(scale) and 0.0 <= scale <= 1.0):
            raise ValueError(f"replay scale = {scale!r}: must be in [0, 1]")
        self.replay_scale = float(scale)

    def set_step_rows(self, rows: int) -> None:
        """Rows a gradient step from the next round on (`train.batch_size` until set): a
        controller that hands the run to on-policy may also move the step size (the anneal's
        `on_policy_batch_size`); the credit carries over in rows."""
        self.step_rows = checks.integer("step rows", rows, minimum=1)

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        yield from self.draw(fresh, self.replay_ratio)

    def draw(self, fresh: RolloutBatch, ratio: float) -> Iterator[Sample]:
        batch_size = self.step_rows
        keys = self.table.insert(fresh)
        self.credit += ratio * len(fresh)
        anchored = round((1.0 - self.replay_scale) * batch_size)
        rows_of, keys_of = fresh, keys
        if self.replay_scale == 0.0 and len(self.carry):
            carried, found = self.table.get_batch(self.carry)
            rows_of = RolloutBatch.concat([carried, fresh])
            keys_of = np.concatenate([self.carry[found], keys])
        self.carry = np.zeros(0, dtype=np.int64)
        start = 0
        while self.credit >= batch_size - 1e-9:
            self.credit -= batch_size
            take = min(anchored, len(rows_of) - start)
            if take <= 0:
                yield self.table.sample(batch_size)
                continue
            rows = np.arange(start, start + take)
            start += take
            own = Sample.from_batch(
                rows_of.select(rows), current_version=self.table.policy_version, keys=keys_of[rows]
            )
            if take == batch_size:
                yield own
            else:
                yield Sample.concat([own, self.table.sample(batch_size - take)])
        if self.replay_scale == 0.0:
            self.carry = np.asarray(keys_of[start:], dtype=np.int64)

    def state(self) -> dict[str, Any]:
        return {
            "credit": self.credit,
            "replay_scale": self.replay_scale,
            "carry": [int(k) for k in self.carry],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.credit = float(state["credit"])
        self.replay_scale = float(state.get("replay_scale", 1.0))
        self.carry = np.asarray(state.get("carry", []), dtype=np.int64)  # absent before #53


@dataclass
class OptionConfig:
    enabled: bool = knob(False, "turn the option on")

    def check(self) -> None:
        """Raise `MethodConfigError` naming the knob."""

    def learner_readings(self) -> list[tuple[str, str | None, object]]:
        """The learner statistics these settings read (`methods.signals.STEP_KEYS`' short
        names), each with the knob that asked for it (None: a reading on by default) and its
        value, so that a front end whose trainer does not report one can refuse the knob or say
        the reading stays silent (`frontend.metric_map.unreported_readings`)."""
        return []


OptionT = TypeVar("OptionT", bound="OptionConfig")


class MethodOption(ABC, Generic[OptionT]):
    """A transform of each fresh round that any method it applies to can turn on."""

    name: ClassVar[str]
    description: ClassVar[str]
    paper: ClassVar[str]
    Config: ClassVar[type[OptionConfig]] = OptionConfig
    sets_replay_scale: ClassVar[bool] = False  # at most one such option drives the scale
    stores_rows: ClassVar[bool] = False  # keeps rollouts that reach later batches (`stored_tables`)

    def __init__(self, settings: OptionConfig, context: MethodContext) -> None:
        if not isinstance(settings, self.Config):
            raise TypeError(f"settings = {settings!r}: expected {self.Config.__name__}")
        self.settings: OptionT = cast(OptionT, settings)
        self.context = context
        self._method: ReplayMethod[Any] | None = None

    @classmethod
    def refusal(cls, method: type[ReplayMethod[Any]]) -> str | None:
        """Why this option cannot be used with `method`, or None."""
        return None

    @classmethod
    def resizes_steps(cls, settings: OptionConfig) -> str | None:
        """The knob with which, so set, the option changes the rows of a gradient step during
        the run, or None: a trainer whose step size is its own (TRL, verl) refuses it."""
        return None

    @classmethod
    def needs_progress(cls, settings: OptionConfig) -> bool:
        """Whether, so set, the option follows the run's budget progress (`signals.progress`),
        so a front end must know the run's length before the first round."""
        return False

    @classmethod
    def needs_reward_model(cls, settings: OptionConfig) -> str | None:
        """The setting (`policy = 'rescore'`) with which the option re-scores stored rows with
        the run's reward model (`context.services.stored_rewards`, which a front end must
        lend), or None."""
        return None

    def bind(self, method: ReplayMethod[Any]) -> None:
        """The method this option serves (the pipeline calls it once, after `refusal`)."""
        self._method = method

    @property
    def method(self) -> ReplayMethod[Any]:
        """The bound method (`bind` comes before any round)."""
        if self._method is None:
            raise RuntimeError(f"option {self.name!r}: bind() comes before the first round")
        return self._method

    @abstractmethod
    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        """The round the method will see (called after the signals recorded the round)."""

    adjusts_samples: ClassVar[bool] = False  # `adjust` is called on every sample

    def adjust(self, sample: Sample) -> Sample:
        """A sample the method yielded, as it will be trained on (options with
        `adjusts_samples`)."""
        return sample

    def set_policy_version(self, version: int) -> None:
        """The learner's version moved (ages stored rollouts)."""

    def observe_step(self) -> None:
        """A gradient step was taken; its statistics are in `context.signals.step`."""

    def metrics(self) -> dict[str, float]:
        return {}

    def stored_tables(self) -> list[ReplayTable]:
        """The tables the option keeps rollouts in that reach the batches (`ReplayMethod`'s)."""
        return []

    def state(self) -> dict[str, Any]:
        """JSON-serialisable state, saved as `<name>.json` by `save` (an option that keeps
        none does not override it, and writes nothing)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore `state()`."""

    @property
    def _stateful(self) -> bool:
        return type(self).state is not MethodOption.state

    def save(self, directory: Path) -> None:
        """Write this option's state under `directory` (an option that also keeps a table adds
        it here)."""
        if self._stateful:
            (directory / f"{self.name}.json").write_text(json.dumps(self.state()))

    def load(self, directory: Path) -> None:
        """Read what `save` wrote (a missing state file is an error, not a fresh start)."""
        if self._stateful:
            self.load_state(json.loads((directory / f"{self.name}.json").read_text()))
