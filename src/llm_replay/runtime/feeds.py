"""How a method's rows reach an asynchronous learner: one feed object per asynchronous mode.

A method declares how it runs asynchronously (`ReplayMethod.async_batches`, "rounds" whenever an
option is on; `methods.pipeline.async_mode`). The threaded and Ray runtimes used to branch on that
string in every place it mattered; each mode is now a `Feed` that owns those places:

- `TableFeed` ("table"): the workers fill the method's own table, rate-limited at its
  samples-per-insert y (the on-policy queue keeps its own limiter); a logged iteration is
  `steps_per_iteration` draws of `train.batch_size`; after each step the table's version moves
  and the signals record the step (the method's state lives with the table, so its metrics are
  its signals' and a checkpoint saves nothing beside the table).
- `RoundsFeed` ("rounds"): the workers deliver rounds to an intake queue, at most
  `max(2, workers.count)` rounds ahead (in items as well as rows under adaptive rollouts, whose
  items are smaller than a round); a logged iteration is one round (`rollouts_per_step`
  rows, or under adaptive rollouts one work item's rows, whole groups), composed into batches
  by the method and its options exactly as in the sync loop, through the method's `ReplayHost`;
  after each step the host records it and moves its version; the metrics are the host's, and a
  checkpoint saves the method's state under `replay/method/`.

A round comes out of the intake queue as rows (`ReplayTable.sample_batch`), so it is padded once,
at the learner.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Protocol

from llm_replay.buffer import ReplayTable, Sample, SampleToInsertRatio
from llm_replay.buffer.rate_limit import RateLimiter
from llm_replay.config import Config
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import AsyncMode
from llm_replay.methods.host import ReplayHost
from llm_replay.methods.pipeline import async_mode
from llm_replay.runtime.components import table_spec

Draw = tuple[Sample, float, float]  # (sample, seconds idle, seconds of table work)


class TableClient(Protocol):
    """The learner's handle on the table the workers fill: local, or a Ray actor."""

    def sample(self, batch_size: int) -> tuple[Sample, float, float]:
        """(sample, seconds blocked by the limiter, seconds of table work and transfer)."""
        ...

    def take_round(
        self, size: int, groups_per_item: int | None = None
    ) -> tuple[RolloutBatch, float, float]:
        """The next round from the intake queue of "rounds" mode, as rows (padding happens at
        the learner), with the same two timings as `sample`: `size` rows, or with
        `groups_per_item` the oldest work item's rows (`ReplayTable.head_rows`), however many
        its adaptive groups came to."""
        ...

    def set_policy_version(self, version: int) -> None: ...


def oldest_item_rows(table: ReplayTable, groups_per_item: int) -> tuple[int, float]:
    """Wait for the intake queue to hold a row, then (the oldest work item's row count, seconds
    waited): the size of a round under adaptive rollouts, whose items vary (`RoundsFeed`)."""
    start = time.perf_counter()
    table.wait_for_sample(1)  # TableClosed when the run stops
    return table.head_rows(groups_per_item), time.perf_counter() - start


def steps_per_iteration(config: Config) -> int:
    """Gradient steps per logged iteration of a `TableFeed`: as many as a sync iteration takes on
    average (a `RoundsFeed` takes each round's own batches)."""
    fresh = config.generation.rollouts_per_step
    return max(1, round(config.replay.samples_per_insert * fresh / config.train.batch_size))


def error_buffer(config: Config) -> float:
    """The limiter's half-band in rollouts: configured, or twice the least that cannot deadlock."""
    if config.workers.error_buffer is not None:
        return config.workers.error_buffer
    r = config.replay.samples_per_insert
    return r * config.generation.rollouts_per_step + config.train.batch_size


def ratio_limiter(config: Config, capacity: int) -> RateLimiter:
    """The limiter that couples workers and learner at the replay ratio, for a table (or the
    shards of one, together) of `capacity` rollouts."""
    fresh, batch = config.generation.rollouts_per_step, config.train.batch_size
    return SampleToInsertRatio(
        config.replay.samples_per_insert,
        min(capacity, max(batch, fresh)),
        error_buffer(config),
        max_insert_batch=fresh,
        max_sample_batch=batch,
    )


class Feed(ABC):
    """One asynchronous mode: the workers' table, the learner's iteration, per-step bookkeeping,
    the method's metrics and where its state is saved (module docstring)."""

    mode: ClassVar[AsyncMode]

    def __init__(self, config: Config, host: ReplayHost) -> None:
        self.host = host

    @classmethod
    @abstractmethod
    def build_table(cls, config: Config) -> ReplayTable:
        """The table the workers fill, built from the config alone (no method is built)."""

    @abstractmethod
    def draws(
        self, client: TableClient, *, mu: float | None = None, progress: float | None = None
    ) -> Iterator[Draw]:
        """One logged iteration's samples, each with the seconds idle and in table work that
        are charged to its step; `mu` and `progress` are the run's, for the method's signals."""

    @abstractmethod
    def after_step(
        self, client: TableClient, sample: Sample, step: dict[str, float], version: int
    ) -> None:
        """The learner stepped to `version` on `sample`."""

    @abstractmethod
    def metrics(self) -> dict[str, float]:
        """The method's metrics as the learner's side has them."""

    def save_method(self, directory: Path) -> bool:
        """Save the method's state to `directory` where it lives with the learner; False if
        it lives elsewhere."""
        return False

    def load_method(self, directory: Path) -> None:  # noqa: B027 (a feed may save nothing)
        """Load what `save_method` wrote (nothing where it wrote nothing)."""


class TableFeed(Feed):
    mode = "table"

    def __init__(self, config: Config, host: ReplayHost) -> None:
        super().__init__(config, host)
        self.batch_size = config.train.batch_size
        self.steps = steps_per_iteration(config)

    @classmethod
    def build_table(cls, config: Config) -> ReplayTable:
        spec = table_spec(config)
        if config.replay.method_class.consumes_rollouts:  # the queue keeps its own limiter
            return spec.build()
        return spec.build(ratio_limiter(config, spec.max_rollouts))

    def draws(
        self, client: TableClient, *, mu: float | None = None, progress: float | None = None
    ) -> Iterator[Draw]:
        self.host.set_run(mu=mu, progress=progress)
        for _ in range(self.steps):
            yield client.sample(self.batch_size)

    def after_step(
        self, client: TableClient, sample: Sample, step: dict[str, float], version: int
    ) -> None:
        client.set_policy_version(version)
        self.host.signals.record_step(sample, step)  # the method's table is the workers'
        self.host.signals.set_policy_version(version)

    def metrics(self) -> dict[str, float]:
        return dict(self.host.signals.metrics())


class RoundsFeed(Feed):
    mode = "rounds"

    def __init__(self, config: Config, host: ReplayHost) -> None:
        super().__init__(config, host)
        self.round_size = config.generation.rollouts_per_step
        self.groups_per_item = groups_per_item(config)

    @classmethod
    def build_table(cls, config: Config) -> ReplayTable:
        fresh, ahead = config.generation.rollouts_per_step, max(2, config.workers.count)
        per_item = groups_per_item(config)  # adaptive items vary in rows: bounded in items too
        return ReplayTable.queue(
            fresh * ahead,
            max_insert_batch=fresh,
            max_sample_batch=fresh,
            seed=config.train.seed,
            name="intake",
            max_items=None if per_item is None else ahead,
            groups_per_item=per_item,
        )

    def draws(
        self, client: TableClient, *, mu: float | None = None, progress: float | None = None
    ) -> Iterator[Draw]:
        fresh, idle, table_seconds = client.take_round(self.round_size, self.groups_per_item)
        batches = self.host.round(fresh, mu=mu, progress=progress)
        while True:
            start = time.perf_counter()
            sample = next(batches, None)
            composed = time.perf_counter() - start
            if sample is None:
                return
            yield sample, idle, table_seconds + composed
            idle = table_seconds = 0.0

    def after_step(
        self, client: TableClient, sample: Sample, step: dict[str, float], version: int
    ) -> None:
        self.host.after_step(sample, step, version)

    def metrics(self) -> dict[str, float]:
        return self.host.metrics()

    def save_method(self, directory: Path) -> bool:
        self.host.save_state(directory)
        return True

    def load_method(self, directory: Path) -> None:
        self.host.load_state(directory)


def groups_per_item(config: Config) -> int | None:
    """Under adaptive rollouts a work item's groups (`prompts_per_step`), taken and bounded as a
    whole since its rows vary; None when a round has a fixed number of rows."""
    g = config.generation
    return g.prompts_per_step if g.adaptive.enabled else None


FEEDS: dict[str, type[Feed]] = {"table": TableFeed, "rounds": RoundsFeed}


def feed_class(config: Config) -> type[Feed]:
    """The feed a config's method runs with asynchronously."""
    method: Any = config.replay.method_class
    return FEEDS[async_mode(method, bool(config.replay.enabled_options()))]


def build_async_table(config: Config) -> ReplayTable:
    """The table the workers fill: one of the method's spec (rate-limited at its ratio), or the
    intake queue of rounds; built from the config alone, so no method is built to get it."""
    return feed_class(config).build_table(config)
