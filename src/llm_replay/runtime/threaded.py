"""The threaded runtime: W generation workers and one learner, concurrent, in one process.

Each worker thread owns a copy of the policy, a generator with its own RNG and a reward scorer; it
takes a work item, pulls newer weights if the learner has published any, generates and scores the
item's groups, and delivers them through the `IngestGate`. The learner (the calling thread) runs
the async core's iterations (`async_core.AsyncLearner`): sample or compose, step, advance the
version, publish every `workers.publish_every` steps. The table's rate limiter is the only
coupling: it blocks workers while the learner is behind and the learner while data is short.

Torch releases the GIL inside its kernels, so threads do overlap; on a GPU the workers and the
learner share the device. Unlike the sync loop, a run is not bit-for-bit repeatable: which weights
a rollout was generated with depends on timing (its policy version records it).

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
from llm_replay.buffer.rate_limit import TableClosed
from llm_replay.config import Config
from llm_replay.metrics import ComputeMeter, RoleClock
from llm_replay.runtime.adaptive_rollouts import AdaptiveRollouts, worker_adaptive
from llm_replay.runtime.async_core import (
    AsyncLearner,
    LocalTable,
    WorkerStats,
    account_delivery,
    account_learner_steps,
    add_counts,
    limiter_metrics,
)
from llm_replay.runtime.checkpoint import (
    ASYNC_STATE,
    check_state,
    load_training_checkpoint,
    save_learner_files,
    write_checkpoint,
)
from llm_replay.runtime.components import build_learner_parts
from llm_replay.runtime.feeds import build_async_table
from llm_replay.runtime.ingest import TABLE_DIR, IngestGate, WorkerError, WorkPlan, make_item
from llm_replay.runtime.layout import CHECKPOINT_DIR, METHOD_DIR, REPLAY_DIR
from llm_replay.runtime.loop import RunLoop, summarise_steps
from llm_replay.runtime.protocols import WeightTransfer, WorkerHealth
from llm_replay.runtime.rollouts import RolloutMaker, worker_seed
from llm_replay.runtime.weights import InProcessWeights

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
        on_delivered: Callable[[ComputeMeter, dict[str, float], dict[str, int]], None],
        on_error: Callable[[int, BaseException], None],
        adaptive: AdaptiveRollouts | None = None,
    ) -> None:
        self.index = index
        self.adaptive = adaptive
        self.maker, self.plan, self.gate = maker, plan, gate
        self.generator: Any = maker.generator
        self.weights, self.clock, self.seed = weights, clock, seed
        self.on_delivered, self.on_error = on_delivered, on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = WorkerStats()
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
        pulled = self.weights.pull(self.generator.model, self.generator.policy_version)
        if pulled is None:
            return False
        self.generator.policy_version = pulled
        return True

    def health(self) -> WorkerHealth:
        return WorkerHealth(
            worker=self.index,
            alive=self.alive,
            policy_version=self.generator.policy_version,
            items_delivered=self.stats.items_delivered,
            rollouts_delivered=self.stats.rollouts_delivered,
            busy_seconds=self.stats.busy_seconds,
            idle_seconds=self.stats.idle_seconds,
            error=self.error,
        )

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                start = time.perf_counter()
                self.update_weights(self.weights.version)
                synced = time.perf_counter() - start
                item = self.plan.take()
                made = make_item(
                    self.maker, item, self.seed, self.plan.prompts_per_item, self.adaptive
                )
                if self._stop.is_set():
                    self.plan.give_back(item)
                    return
                try:
                    commit = functools.partial(
                        self.on_delivered, made.meter, made.metrics, made.reward_counts
                    )
                    delivery = self.gate.deliver(made.batch, item.item_id, on_commit=commit)
                except TableClosed:
                    self.plan.give_back(item)
                    return
                account_delivery(
                    self.clock,
                    self.stats,
                    rollouts=delivery.rollouts,
                    busy=made.seconds + synced + delivery.table_seconds,
                    idle=delivery.idle_seconds,
                    table=delivery.table_seconds,
                    weight_sync=synced,
                    policy_version=self.generator.policy_version,
                )
        except BaseException as error:  # reported to the learner, which stops the run
            self.error = f"{type(error).__name__}: {error}"
            self.on_error(self.index, error)


class ThreadedTrainer(RunLoop):
    """Learner, evaluation and run loop in the calling thread, fed by concurrent worker threads."""

    def __init__(self, config: Config, *, run_dir: Path | None = None) -> None:
        self._init_loop(config, run_dir)
        parts = build_learner_parts(config, threads=config.train.threads)
        self.policy, self.learner, self.replay = parts.policy, parts.learner, parts.replay
        self.generator, self.evaluator = parts.generator, parts.evaluator  # evaluation's
        self.model = self.policy.model
        self.meter = ComputeMeter(parameters=self.policy.parameters)
        self.plan = WorkPlan(config.generation.prompts_per_step)
        self._set_table(build_async_table(config))
        self.weights = InProcessWeights(
            self.model, self.learner.update_lock, lambda: self.learner.version
        )
        self.clock = RoleClock()
        self.workers: list[ThreadWorker] = []
        self._lock = threading.Lock()
        self._fresh_metrics: list[dict[str, float]] = []
        self._failure: tuple[int, BaseException] | None = None
        self.reward_counts: dict[str, int] = {}

    def _set_table(self, table: ReplayTable) -> None:
        self.table = table
        self.gate = IngestGate(table, self.plan)
        self.core = AsyncLearner(
            self.config, self.learner, LocalTable(table), self.replay, self._publish
        )

    @property
    def steps(self) -> int:
        return self.learner.version

    def _publish(self, version: int) -> None:
        self.weights.publish(version)

    # ------------------------------------------------------------------ workers
    def _start_workers(self) -> None:
        if self.workers:
            return
        self.weights.publish(self.learner.version)
        w = self.config.workers
        device = w.device or self.config.model.device
        for index in range(w.count):
            model = copy.deepcopy(self.model).to(device).eval()
            model.requires_grad_(False)
            seed = worker_seed(self.config.train.seed, index, self.learner.version)
            generator = self.policy.generator(seed, model=model)
            generator.policy_version = -1  # pulls the learner's weights before its first item
            self.workers.append(
                ThreadWorker(
                    index,
                    maker=self.policy.rollout_maker(generator),
                    plan=self.plan,
                    gate=self.gate,
                    weights=self.weights,
                    clock=self.clock,
                    seed=self.config.train.seed,
                    on_delivered=self._on_delivered,
                    on_error=self._on_error,
                    adaptive=worker_adaptive(self.config.generation.adaptive),
                )
            )
        self.clock.start()
        for worker in self.workers:
            worker.start()
        log.info("started %d generation workers on %s", len(self.workers), device)

    def _on_delivered(
        self, meter: ComputeMeter, metrics: dict[str, float], counts: dict[str, int]
    ) -> None:
        with self._lock:
            self.meter.merge(meter)
            self._fresh_metrics.append(metrics)
            add_counts(self.reward_counts, counts)

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
        for worker in self.workers:
            worker.maker.scorer.close()
        self.evaluator.scorer.close()

    # ------------------------------------------------------------------ learner
    def train_iteration(self) -> dict[str, Any]:
        self._start_workers()
        self._raise_if_failed()
        try:
            with self._lock:
                mu = self.meter.mu
                progress = self.schedule.progress(self.iteration, self.meter)
            raw = self.core.iteration(mu, progress)
        except TableClosed:
            self._raise_if_failed()
            raise
        with self._lock:
            steps = account_learner_steps(raw, self.meter, self.clock)
            fresh, self._fresh_metrics = self._fresh_metrics, []
        self.iteration += 1
        record: dict[str, Any] = summarise_steps(fresh, steps)
        record.update(self.core.feed.metrics())
        record.update(self.async_metrics())
        return record

    def evaluate(self) -> dict[str, Any]:
        self.generator.policy_version = self.learner.version
        return self.evaluator(self.iteration)

    def async_metrics(self) -> dict[str, float]:
        """Table stats, the limiter's position in its band, and the role clock."""
        out = limiter_metrics(self.table)
        out["async/workers_alive"] = float(sum(w.alive for w in self.workers))
        out.update(self.clock.metrics())
        return out

    def extra_summary(self) -> dict[str, Any]:
        return {"async": self.async_metrics()}

    def health(self) -> list[WorkerHealth]:
        return [worker.health() for worker in self.workers]

    # ------------------------------------------------------------------ checkpoints
    def reward_failures(self) -> dict[str, int]:
        with self._lock:
            total = dict(self.reward_counts)
        return add_counts(total, vars(self.evaluator.scorer.counts))

    def save_checkpoint(self) -> Path:
        state = {**self._loop_state(), "learner_version": self.learner.version}

        def snapshot() -> dict[str, Any]:
            with self._lock:
                return {
                    "meter": self.meter.state_dict(),
                    "clock": self.clock.state_dict(),
                    "reward_counts": add_counts(
                        dict(self.reward_counts), vars(self.evaluator.scorer.counts)
                    ),
                }

        def save_replay(directory: Path) -> dict[str, Any]:
            self.core.feed.save_method(directory / METHOD_DIR)
            saved = self.gate.save(directory / TABLE_DIR, snapshot)
            saved.pop("delivered_ids")
            return saved

        def save_learner(directory: Path) -> None:
            save_learner_files(
                directory,
                model=self.model,
                optimizer=self.learner.optimizer,
                rng=self.generator.rng,
                signals=self.replay.signals,
            )

        return write_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            save_learner=save_learner,
            save_replay=save_replay,
            state=state,
        )

    def load_checkpoint(self) -> None:
        source, state = load_training_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            model=self.model,
            optimizer=self.learner.optimizer,
            rng=self.generator.rng,
            signals=self.replay.signals,
        )
        if "work_plan" not in state:
            raise CheckpointError(f"{source}: not a checkpoint of an asynchronous run")
        check_state(source, state, ASYNC_STATE)
        self._set_table(ReplayTable.load(source / REPLAY_DIR / TABLE_DIR))
        self.core.feed.load_method(source / REPLAY_DIR / METHOD_DIR)
        self.plan.load_state(state["work_plan"])
        self.clock.load_state_dict(state["clock"])
        self.reward_counts = {k: int(v) for k, v in state["reward_counts"].items()}
        self.learner.version = int(state["learner_version"])
        self._restore_loop(state)
        outstanding = len(state["work_plan"]["outstanding"])
        if outstanding:
            log.info("resume: %d work items were in flight; generating them again", outstanding)
