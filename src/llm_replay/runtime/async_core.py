"""What the threaded and Ray runtimes share beyond the work plan: the learner's step and the
accounting of steps and deliveries.

How the method's rows reach the learner is its feed (`runtime/feeds.py`): `TableFeed` (workers
fill the method's own table, the learner samples it at the replay ratio) or `RoundsFeed`
(workers deliver rounds, the method composes each round's batches as in the sync loop).

`AsyncLearner.iteration` runs one logged iteration of learner steps (draw from the feed, train,
advance the version, publish, time) and returns per-step records; `account_learner_steps`
charges them to the run's meter and role clock, wherever the learner ran. Deliveries are charged
by `account_delivery` in both runtimes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from llm_replay.buffer import ReplayTable, Sample
from llm_replay.buffer.rate_limit import RateLimiterTimeout
from llm_replay.config import Config
from llm_replay.data.batch import RolloutBatch
from llm_replay.learner import Learner, sample_metrics
from llm_replay.methods.host import ReplayHost
from llm_replay.metrics import ComputeMeter, RoleClock
from llm_replay.runtime.feeds import Feed, TableClient, feed_class, oldest_item_rows

T = TypeVar("T")

PRIVATE_KEYS = ("_busy", "_idle", "_table", "_weight_sync", "_rollouts")


def limiter_metrics(table: ReplayTable) -> dict[str, float]:
    """Table stats and where the limiter stands in its band. The intake queue of "rounds" mode
    reports as `intake/...`, so the method's own `buffer/...` metrics stay its table's."""
    stats = table.stats()
    out = {k: float(v) for k, v in stats.metrics().items()}
    if table.name == "intake":
        out = {k.replace("buffer/", "intake/", 1): v for k, v in out.items()}
    limiter = table.rate_limiter
    spi = getattr(limiter, "samples_per_insert", None)
    if spi is not None:
        out["async/limiter_diff"] = stats.inserts * spi - stats.samples
        out["async/limiter_min_diff"] = float(limiter.min_diff)
        out["async/limiter_max_diff"] = float(limiter.max_diff)
    return out


class LocalTable:
    """`TableClient` for a table in this process."""

    def __init__(self, table: ReplayTable) -> None:
        self.table = table

    def sample(self, batch_size: int) -> tuple[Sample, float, float]:
        return self._draw(batch_size, self.table.sample)

    def take_round(
        self, size: int, groups_per_item: int | None = None
    ) -> tuple[RolloutBatch, float, float]:
        idle = 0.0
        if groups_per_item is not None:  # the oldest work item's rows, however many
            size, idle = oldest_item_rows(self.table, groups_per_item)
        drawn, waited, seconds = self._draw(size, self.table.sample_batch)
        return drawn, idle + waited, seconds

    def _draw(self, n: int, draw: Callable[..., T]) -> tuple[T, float, float]:
        idle = 0.0
        while True:
            start = time.perf_counter()
            self.table.wait_for_sample(n)  # TableClosed when the run stops
            idle += time.perf_counter() - start
            start = time.perf_counter()
            try:
                drawn = draw(n, timeout=0)
            except RateLimiterTimeout:  # an insert evicted what made the sample possible
                continue
            return drawn, idle, time.perf_counter() - start

    def set_policy_version(self, version: int) -> None:
        self.table.set_policy_version(version)


class AsyncLearner:
    """The learner's side of an asynchronous run, the same under threads and Ray."""

    def __init__(
        self,
        config: Config,
        learner: Learner,
        client: TableClient,
        host: ReplayHost,
        publish: Callable[[int], None],
    ) -> None:
        self.learner, self.client, self.host, self.publish = learner, client, host, publish
        self.feed: Feed = feed_class(config)(config, host)
        self.publish_every = config.workers.publish_every

    def iteration(
        self, mu: float | None = None, progress: float | None = None
    ) -> list[dict[str, float]]:
        """One logged iteration of the feed's draws; `mu` and `progress` are the run's measured
        μ and budget progress, for the signals."""
        draws = self.feed.draws(self.client, mu=mu, progress=progress)
        return [self._step(*draw) for draw in draws]

    def _step(self, sample: Sample, idle: float, table_seconds: float) -> dict[str, float]:
        start = time.perf_counter()
        step = self.learner.step(sample)
        trained = time.perf_counter()
        version = self.learner.version
        self.feed.after_step(self.client, sample, step, version)
        table_seconds += time.perf_counter() - trained
        synced = 0.0
        if version % self.publish_every == 0:
            before = time.perf_counter()
            self.publish(version)
            synced = time.perf_counter() - before
        return {
            **step,
            **sample_metrics(sample),
            "_busy": time.perf_counter() - start + table_seconds,
            "_idle": idle,
            "_table": table_seconds,
            "_weight_sync": synced,
            "_rollouts": float(len(sample)),
        }


def account_learner_steps(
    steps: list[dict[str, float]], meter: ComputeMeter, clock: RoleClock
) -> list[dict[str, float]]:
    """Charge learner steps to the run's meter and clock; returns the steps' public metrics."""
    out = []
    for step in steps:
        private = {key: step[key] for key in PRIVATE_KEYS}
        public = {k: v for k, v in step.items() if k not in PRIVATE_KEYS}
        meter.add_seconds("training", private["_busy"])
        meter.add_training_step(int(private["_rollouts"]), public)
        clock.add(
            "learner",
            busy=private["_busy"],
            idle=private["_idle"],
            table=private["_table"],
            weight_sync=private["_weight_sync"],
            samples_out=int(private["_rollouts"]),
        )
        out.append(public)
    return out


@dataclass
class WorkerStats:
    """A generation worker's delivered work, as the driver accounts it."""

    items_delivered: int = 0
    rollouts_delivered: int = 0
    busy_seconds: float = 0.0
    idle_seconds: float = 0.0
    policy_version: int = -1


def account_delivery(
    clock: RoleClock,
    stats: WorkerStats,
    *,
    rollouts: int,
    busy: float,
    idle: float,
    table: float,
    weight_sync: float,
    policy_version: int,
) -> None:
    """Charge one delivered work item to its worker's stats and the generator role's clock."""
    stats.items_delivered += 1
    stats.rollouts_delivered += rollouts
    stats.busy_seconds += busy
    stats.idle_seconds += idle
    stats.policy_version = policy_version
    clock.add(
        "generator",
        busy=busy,
        idle=idle,
        table=table,
        weight_sync=weight_sync,
        rollouts_in=rollouts,
    )


def add_counts(total: dict[str, int], counts: dict[str, Any]) -> dict[str, int]:
    """Reward-failure counts: one schema (RewardCounts' fields) summed over scorers."""
    for key, value in counts.items():
        total[key] = total.get(key, 0) + int(value)
    return total
