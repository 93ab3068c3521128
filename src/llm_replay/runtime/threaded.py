"""The threaded runtime: W generation workers and one learner, concurrent, in one process.

Each worker thread owns a copy of the policy, a generator with its own RNG and a reward scorer; it
takes a work item, pulls newer weights if the learner has published any, generates and scores the
item's groups, and delivers them to the table through the `IngestGate`. The learner (the calling
thread) samples batches, steps, advances the table's policy version (ageing stored rollouts) and
publishes weights every `workers.publish_every` steps. The table's rate limiter is the only
coupling: it blocks workers while the learner is behind and the learner while data is short.

Torch releases the GIL inside its kernels, so threads do overlap; on a GPU the workers and the
learner share the device. One logged iteration is as many gradient steps as a sync iteration takes
on average (`ingest.steps_per_iteration`), so budgets, evaluation cadence and logs read the same
as the sync loop's. Unlike the sync loop, a run is not bit-for-bit repeatable: which weights a
rollout was generated with depends on timing (its policy version records it).

Shutdown: Ctrl-C reaches the learner thread; the run loop saves a checkpoint at an iteration
boundary, then `close` stops the workers (closing the table wakes any that are blocked). An error in
a worker closes the table too; the learner raises `WorkerError` with the worker's exception.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.checkpoint import CheckpointError
from llm_replay.buffer.rate_limit import RateLimiterTimeout, TableClosed
from llm_replay.config import Config
from llm_replay.learner import sample_metrics
from llm_replay.metrics import ComputeMeter, RoleClock
from llm_replay.runtime.checkpoint import save_training_checkpoint
from llm_replay.runtime.ingest import (
    TABLE_DIR,
    Delivery,
    IngestGate,
    WorkerError,
    WorkPlan,
    build_async_table,
    steps_per_iteration,
)
from llm_replay.runtime.loop import CHECKPOINT_DIR, summarise_steps
from llm_replay.runtime.protocols import InProcessWeights, WeightTransfer, WorkerHealth
from llm_replay.runtime.rollouts import RolloutMaker
from llm_replay.runtime.sync import SyncTrainer
from llm_replay.tasks import SafeScorer
from llm_replay.tasks.rewards import RewardCounts

log = logging.getLogger(__name__)
__all__ = ["ThreadWorker", "ThreadedTrainer", "WorkerError"]


class ThreadWorker:
    """A `RolloutWorker` on a thread: take item → pull weights → generate → deliver."""

    def __init__(
        self,
        index: int,
        *,
        maker: RolloutMaker,
        plan: WorkPlan,
        gate: IngestGate,
        weights: WeightTransfer,
        clock: RoleClock,
        seed: int,
        on_delivered: Callable[[ComputeMeter, dict[str, float]], None],
        on_error: Callable[[int, BaseException], None],
    ) -> None:
        self.index = index
        self.maker, self.generator, self.plan, self.gate = maker, maker.generator, plan, gate
        self.weights, self.clock, self.seed = weights, clock, seed
        self.on_delivered, self.on_error = on_delivered, on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.items_delivered = 0
        self.rollouts_delivered = 0
        self.busy_seconds = 0.0
        self.idle_seconds = 0.0
        self.error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name=f"llm-replay-generator-{self.index}", daemon=True
        )
        self._thread.start()

    def signal_stop(self) -> None:
        """Ask the worker to stop after its current step, without waiting for it."""
        self._stop.set()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def update_weights(self, version: int) -> bool:
        if version <= self.generator.policy_version:
            return False
        fetched = self.weights.fetch(self.generator.policy_version)
        if fetched is None:
            return False
        new_version, state = fetched
        self.generator.load_weights(state, new_version)
        return True

    def health(self) -> WorkerHealth:
        return WorkerHealth(
            worker=self.index,
            alive=self.alive,
            policy_version=self.generator.policy_version,
            items_delivered=self.items_delivered,
            rollouts_delivered=self.rollouts_delivered,
            busy_seconds=self.busy_seconds,
            idle_seconds=self.idle_seconds,
            error=self.error,
        )

    def _loop(self) -> None:
        problems = self.maker.problems
        count = self.plan.prompts_per_item
        try:
            while not self._stop.is_set():
                start = time.perf_counter()
                self.update_weights(self.weights.version)
                synced = time.perf_counter() - start
                item = self.plan.take()
                meter = ComputeMeter()
                start = time.perf_counter()
                indices = item.indices(self.seed, len(problems), count)
                batch, metrics = self.maker.make(indices, item.first_group, meter)
                generated = time.perf_counter() - start
                if self._stop.is_set():
                    self.plan.give_back(item)
                    return
                try:
                    commit = functools.partial(self.on_delivered, meter, metrics)
                    delivery = self.gate.deliver(batch, item.item_id, on_commit=commit)
                except TableClosed:
                    self.plan.give_back(item)
                    return
                self._account(delivery, generated + synced, synced)
        except BaseException as error:  # reported to the learner, which stops the run
            self.error = f"{type(error).__name__}: {error}"
            self.on_error(self.index, error)

    def _account(self, delivery: Delivery, busy: float, synced: float) -> None:
        busy += delivery.table_seconds
        self.items_delivered += 1
        self.rollouts_delivered += delivery.rollouts
        self.busy_seconds += busy
        self.idle_seconds += delivery.idle_seconds
        self.clock.add(
            "generator",
            busy=busy,
            idle=delivery.idle_seconds,
            table=delivery.table_seconds,
            weight_sync=synced,
            rollouts_in=delivery.rollouts,
        )


class ThreadedTrainer(SyncTrainer):
    """The sync trainer's learner, evaluation and run loop, fed by concurrent worker threads."""

    def __init__(self, config: Config, *, run_dir: Path | None = None) -> None:
        super().__init__(config, run_dir=run_dir)
        self.plan = WorkPlan(config.generation.prompts_per_step)
        self.table = build_async_table(config)
        self.gate = IngestGate(self.table, self.plan)
        self.weights = InProcessWeights()
        self.clock = RoleClock()
        self.steps_per_iteration = steps_per_iteration(config)
        self.workers: list[ThreadWorker] = []
        self._scorers: list[SafeScorer] = []
        self._lock = threading.Lock()
        self._fresh_metrics: list[dict[str, float]] = []
        self._failure: tuple[int, BaseException] | None = None
        self._reward_base: dict[str, int] = {}

    # ------------------------------------------------------------------ workers
    def _start_workers(self) -> None:
        if self.workers:
            return
        self.weights.publish(self.model.state_dict(), self.learner.version)
        w = self.config.workers
        device = w.device or self.config.model.device
        for index in range(w.count):
            model = copy.deepcopy(self.model).to(device).eval()
            model.requires_grad_(False)
            maker = RolloutMaker.for_worker(
                self.config,
                model=model,
                tokenizer=self.tokenizer,
                task=self.task,
                prompts=self.train_prompts,
                seed=self.config.train.seed * 1009 + 7 * (index + 1) + self.learner.version,
            )
            self._scorers.append(maker.scorer)
            self.workers.append(
                ThreadWorker(
                    index,
                    maker=maker,
                    plan=self.plan,
                    gate=self.gate,
                    weights=self.weights,
                    clock=self.clock,
                    seed=self.config.train.seed,
                    on_delivered=self._on_delivered,
                    on_error=self._on_error,
                )
            )
        self.clock.start()
        for worker in self.workers:
            worker.start()
        log.info("started %d generation workers on %s", len(self.workers), device)

    def _on_delivered(self, meter: ComputeMeter, metrics: dict[str, float]) -> None:
        with self._lock:
            self.meter.merge(meter)
            self._fresh_metrics.append(metrics)

    def _on_error(self, index: int, error: BaseException) -> None:
        log.error("generation worker %d failed: %s", index, error)
        with self._lock:
            if self._failure is None:
                self._failure = (index, error)
        self.table.close()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            index, error = self._failure
            raise WorkerError(f"generation worker {index} failed: {error!r}") from error

    def close(self) -> None:
        for worker in self.workers:
            worker.signal_stop()
        self.table.close()  # wakes workers blocked on the limiter
        for worker in self.workers:
            worker.stop(timeout=60)
            if worker.alive:
                log.warning("generation worker %d did not stop within 60 s", worker.index)
        self.clock.pause()
        for scorer in self._scorers:
            scorer.close()
        super().close()

    # ------------------------------------------------------------------ learner
    def _learner_step(self) -> dict[str, float]:
        batch = self.config.train.batch_size
        idle = table_seconds = synced = 0.0
        while True:
            start = time.perf_counter()
            try:
                self.table.wait_for_sample(batch)
            except TableClosed:
                self._raise_if_failed()
                raise
            idle += time.perf_counter() - start
            busy_start = time.perf_counter()
            try:
                sample = self.table.sample(batch, timeout=0)
                break
            except RateLimiterTimeout:  # an insert evicted what made the sample possible
                continue
        table_seconds += time.perf_counter() - busy_start
        step = self.learner.step(sample)
        start = time.perf_counter()
        self.table.set_policy_version(self.learner.version)
        table_seconds += time.perf_counter() - start
        if self.learner.version % self.config.workers.publish_every == 0:
            start = time.perf_counter()
            self.weights.publish(self.model.state_dict(), self.learner.version)
            synced = time.perf_counter() - start
        busy = time.perf_counter() - busy_start
        with self._lock:
            self.meter.seconds["training"] += busy
            self.meter.add_training_step(len(sample), step)
        self.clock.add(
            "learner",
            busy=busy,
            idle=idle,
            table=table_seconds,
            weight_sync=synced,
            samples_out=len(sample),
        )
        return step | sample_metrics(sample)

    def train_iteration(self) -> dict[str, Any]:
        self._start_workers()
        self._raise_if_failed()
        steps = [self._learner_step() for _ in range(self.steps_per_iteration)]
        self.generator.policy_version = self.learner.version
        self.iteration += 1
        with self._lock:
            fresh, self._fresh_metrics = self._fresh_metrics, []
        record: dict[str, Any] = summarise_steps(fresh, steps)
        record.update(self.async_metrics())
        return record

    def async_metrics(self) -> dict[str, float]:
        """Table stats, the limiter's position in its band, and the role clock."""
        stats = self.table.stats()
        out = {k: float(v) for k, v in stats.metrics().items()}
        limiter = self.table.rate_limiter
        out["async/limiter_diff"] = stats.inserts * limiter.samples_per_insert - stats.samples
        out["async/limiter_min_diff"] = limiter.min_diff
        out["async/limiter_max_diff"] = limiter.max_diff
        out["async/workers_alive"] = float(sum(w.health().alive for w in self.workers))
        out.update(self.clock.metrics())
        return out

    def extra_summary(self) -> dict[str, Any]:
        return {"async": self.async_metrics()}

    def health(self) -> list[WorkerHealth]:
        return [worker.health() for worker in self.workers]

    # ------------------------------------------------------------------ checkpoints
    def reward_failures(self) -> dict[str, int]:
        total = dict(self._reward_base)
        for counts in [self.scorer.counts, *(s.counts for s in self._scorers)]:
            for key, value in vars(counts).items():
                total[key] = total.get(key, 0) + int(value)
        return total

    def save_checkpoint(self) -> Path:
        state = self._state()

        def snapshot() -> dict[str, Any]:
            with self._lock:
                return {"meter": self.meter.state_dict(), "clock": self.clock.state_dict()}

        def save_replay(directory: Path) -> None:
            saved = self.gate.save(directory / TABLE_DIR, snapshot)
            saved.pop("delivered_ids")
            state.update(saved)

        state["reward_counts"] = self.reward_failures()
        return save_training_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            model=self.model,
            optimizer=self.learner.optimizer,
            rng=self.generator.rng,
            state=state,
            save_replay=save_replay,
        )

    def _load_replay(self, directory: Path, state: dict[str, Any]) -> None:
        if "work_plan" not in state:
            raise CheckpointError(f"{directory.parent}: not a checkpoint of an asynchronous run")
        self.table = ReplayTable.load(directory / TABLE_DIR)
        self.gate = IngestGate(self.table, self.plan)
        self.plan.load_state(state["work_plan"])
        self.clock.load_state_dict(state["clock"])
        outstanding = len(state["work_plan"]["outstanding"])
        if outstanding:
            log.info("resume: %d work items were in flight; generating them again", outstanding)

    def load_checkpoint(self) -> None:
        super().load_checkpoint()
        self._reward_base = dict(vars(self.scorer.counts))
        self.scorer.counts = RewardCounts()
