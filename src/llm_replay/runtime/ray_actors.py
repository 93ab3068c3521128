"""The Ray actors: the table, a generation worker, the learner. Plain classes; `ray.py` wraps them
with `ray.remote` and places them with Ray resources.

Each actor composes what it needs from the run's config (a plain dict, so the same YAML drives a
laptop and a cluster) with `runtime.components`: the table actor builds the replay method's async
table (`feeds.build_async_table`), a worker loads the policy and the task, the learner loads
the policy, its optimizer, the evaluation and the replay method, and runs the same
`AsyncLearner` the threaded runtime does. Nothing here is specific to one machine; a cluster needs
the package and the model path on every node, and the run directory on storage the learner and the
driver share (checkpoints are written by the actors that hold the state).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import torch

from llm_replay.buffer import MinSize, ReplayTable, Sample, TableStats
from llm_replay.config import config_from_dict
from llm_replay.data.batch import RolloutBatch
from llm_replay.runtime.adaptive_rollouts import worker_adaptive
from llm_replay.runtime.async_core import AsyncLearner, limiter_metrics
from llm_replay.runtime.checkpoint import load_learner_files, save_learner_files
from llm_replay.runtime.components import Policy, build_learner_parts, table_spec
from llm_replay.runtime.feeds import TableClient, build_async_table, oldest_item_rows
from llm_replay.runtime.ingest import IngestGate, WorkItem, make_item
from llm_replay.runtime.layout import METHOD_DIR, REPLAY_DIR
from llm_replay.runtime.shards import ShardedClient
from llm_replay.runtime.weights import ObjectStoreWeights

T = TypeVar("T")


def _threads(cpus: float) -> None:
    torch.set_num_threads(max(1, int(cpus)))


class TableActor:
    """The table the workers fill (or one shard of it, `runtime.shards`), behind a threaded actor:
    blocking delivers and samples wait on each other exactly as they do in one process.

    A shard's table has no ratio limiter (the front keeps the ratio for all shards). Given a
    `directory`, the table is durable there: when Ray restarts a dead actor, this constructor
    runs again and recovers the table from its log."""

    def __init__(
        self, config: dict[str, Any], directory: str | None = None, shard: bool = False
    ) -> None:
        cfg = config_from_dict(config)
        table = table_spec(cfg).build(MinSize(1)) if shard else build_async_table(cfg)
        self.directory, self.fsync = directory, cfg.workers.table_fsync or "never"
        if directory is not None:
            table = table.make_durable(directory, fsync=self.fsync)
        self.gate = IngestGate(table)

    @property
    def table(self) -> ReplayTable:
        return self.gate.table

    def deliver(self, batch: RolloutBatch, item_id: int) -> dict[str, float]:
        """Insert one work item's rollouts, idempotently (the item id is the insert's token)."""
        out: dict[str, float] = asdict(self.gate.deliver(batch, item_id))
        out["size"] = self.table.size
        return out

    def sample(self, batch_size: int) -> tuple[Sample, float, float]:
        """(sample, seconds blocked by the limiter, seconds inside the table)."""
        return self._timed(batch_size, self.table.sample)

    def take_round(
        self, size: int, groups_per_item: int | None = None
    ) -> tuple[RolloutBatch, float, float]:
        """The next round of the intake queue as rows (`size` of them, or with `groups_per_item`
        the oldest work item's), with the same timings as `sample`."""
        idle = 0.0
        if groups_per_item is not None:
            size, idle = oldest_item_rows(self.table, groups_per_item)
        drawn, waited, seconds = self._timed(size, self.table.sample_batch)
        return drawn, idle + waited, seconds

    def _timed(self, n: int, draw: Callable[[int], T]) -> tuple[T, float, float]:
        start = time.perf_counter()
        self.table.wait_for_sample(n)
        idle = time.perf_counter() - start
        start = time.perf_counter()
        drawn = draw(n)
        return drawn, idle, time.perf_counter() - start

    def sample_sized(self, batch_size: int) -> tuple[Sample, int]:
        """A shard's draw for the front, and the shard's size after it."""
        sample, _, _ = self.sample(batch_size)
        return sample, self.table.size

    def set_policy_version(self, version: int) -> int:
        return self.table.set_policy_version(version)

    def advance(self, version: int) -> int:
        """Move to policy `version` (evicting by age); returns the size after."""
        if version > self.table.policy_version:
            self.table.set_policy_version(version)
        return self.table.size

    def stats(self) -> dict[str, float]:
        return limiter_metrics(self.table)

    def table_stats(self) -> TableStats:
        return self.table.stats()

    def save(self, directory: str) -> list[int]:
        """Save the table; returns the ids of the items it holds (an item is delivered iff its
        insert token is in the saved table)."""
        ids: list[int] = self.gate.save(Path(directory))["delivered_ids"]
        return ids

    def load(self, directory: str) -> None:
        table = ReplayTable.load(directory)
        if self.directory is not None:  # the durable log now starts from the checkpoint
            table = table.make_durable(self.directory, replace=True, fsync=self.fsync)
        self.gate = IngestGate(table)

    def pid(self) -> int:
        """The actor's process id (a restarted actor has a new one)."""
        return os.getpid()

    def close(self) -> None:
        self.table.close()


class RemoteTable:
    """`TableClient` for the table actor (sample and version calls go through Ray)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def sample(self, batch_size: int) -> tuple[Sample, float, float]:
        import ray

        call = time.perf_counter()
        sample, idle, _ = ray.get(self.actor.sample.remote(batch_size))
        return sample, idle, time.perf_counter() - call - idle  # table work, call and transfer

    def take_round(
        self, size: int, groups_per_item: int | None = None
    ) -> tuple[RolloutBatch, float, float]:
        import ray

        call = time.perf_counter()
        fresh, idle, _ = ray.get(self.actor.take_round.remote(size, groups_per_item))
        return fresh, idle, time.perf_counter() - call - idle

    def set_policy_version(self, version: int) -> None:
        import ray

        ray.get(self.actor.set_policy_version.remote(version))


class GenerationActor:
    """A generation worker: its own copy of the policy on its own device; returns scored groups."""

    def __init__(self, config: dict[str, Any], index: int, seed: int) -> None:
        cfg = config_from_dict(config)
        _threads(cfg.workers.cpus_per_worker)
        self.index, self.config = index, cfg
        policy = Policy.load(cfg, device=cfg.workers.device or cfg.model.device)
        policy.model.eval().requires_grad_(False)
        self.generator = policy.generator(seed)
        self.generator.policy_version = -1
        self.maker = policy.rollout_maker(self.generator)
        self.scorer = self.maker.scorer
        self.adaptive = worker_adaptive(cfg.generation.adaptive)

    def generate(
        self, item: dict[str, int], weights: tuple[int, list[Any]]
    ) -> tuple[RolloutBatch, dict[str, Any]]:
        """Rollouts for one work item, after moving to the published weights if they are newer."""
        import ray

        start = time.perf_counter()
        version, (ref,) = weights
        if version > self.generator.policy_version:
            self.generator.load_weights(ray.get(ref), version)
        synced = time.perf_counter() - start
        made = make_item(
            self.maker,
            WorkItem(**item),
            self.config.train.seed,
            self.config.generation.prompts_per_step,
            self.adaptive,
        )
        info = {
            "meter": made.meter.state_dict(),
            "metrics": made.metrics,
            "busy": made.seconds + synced,
            "weight_sync": synced,
            "reward_counts": made.reward_counts,
            "policy_version": self.generator.policy_version,
        }
        return made.batch, info

    def ping(self) -> int:
        return self.generator.policy_version


class LearnerActor:
    """The learner: model, optimizer, evaluation and the replay method; runs the async core's
    iterations against the table actor and publishes weights to the object store."""

    def __init__(self, config: dict[str, Any], run_dir: str, table: Any) -> None:
        cfg = config_from_dict(config)
        parts = build_learner_parts(cfg, threads=cfg.workers.learner_cpus)
        self.policy, self.learner, self.replay = parts.policy, parts.learner, parts.replay
        self.generator, self.evaluator = parts.generator, parts.evaluator
        self.weights = ObjectStoreWeights()
        client: TableClient = (
            ShardedClient(table, cfg.workers.table_shards)
            if cfg.workers.sharded
            else RemoteTable(table)
        )
        self.core = AsyncLearner(cfg, self.learner, client, self.replay, self._publish)
        self._publish(self.learner.version)

    def _publish(self, version: int) -> None:
        self.weights.publish(self.policy.model, version)

    def parameters(self) -> int:
        return self.policy.parameters

    def latest_weights(self) -> tuple[int, list[Any]]:
        return self.weights.latest

    def train_iteration(
        self, mu: float | None = None, progress: float | None = None
    ) -> tuple[list[dict[str, float]], dict[str, float]]:
        """One iteration's raw steps (with accounting fields) and the method's metrics; `mu` and
        `progress` are the run's measured μ and budget progress (the driver's meter and schedule
        have them), for the method's signals."""
        steps = self.core.iteration(mu, progress)
        return steps, self.core.feed.metrics()

    def evaluate(self, iteration: int) -> dict[str, Any]:
        self.generator.policy_version = self.learner.version
        return self.evaluator(iteration)

    def save(self, directory: str) -> None:
        save_learner_files(
            Path(directory),
            model=self.policy.model,
            optimizer=self.learner.optimizer,
            rng=self.generator.rng,
            signals=self.replay.signals,
        )

    def save_method(self, directory: str) -> bool:
        """The method's own state where it lives with the learner (`Feed.save_method`)."""
        return self.core.feed.save_method(Path(directory))

    def load(self, directory: str, version: int) -> None:
        # the driver resolved and verified `directory` (RayTrainer.load_checkpoint)
        load_learner_files(
            Path(directory),
            model=self.policy.model,
            optimizer=self.learner.optimizer,
            rng=self.generator.rng,
            signals=self.replay.signals,
        )
        self.learner.version = version
        self.core.feed.load_method(Path(directory) / REPLAY_DIR / METHOD_DIR)
        self._publish(version)

    def reward_failures(self) -> dict[str, int]:
        return dict(vars(self.evaluator.scorer.counts))
