"""The Ray runtime: the table, the generation workers and the learner as Ray actors.

The driver (this process) coordinates and owns no model. It hands out work items, passes each
worker the newest weights' object reference with its item (weights are published to the object
store by the learner; a worker fetches them only when the version is newer than its own), and
sends each returned batch to the table actor by reference, so rollouts go from worker to table
through the object store without passing through the driver. The learner actor runs gradient
steps on batches it samples from the table actor. The table's rate limiter couples the two sides
exactly as in the threaded runtime.

Delivery is exactly-once: a rollout counts as delivered when the table acknowledges the insert
of the batch a worker returned. If a worker dies, its item has not been inserted (its result never
came back), so the item is handed out again and a fresh actor takes the dead one's place (up to
`workers.max_restarts` times per worker); nothing in the table is lost or doubled.

Placement is by Ray resources (`workers.cpus_per_worker`, `gpus_per_worker`, `learner_cpus`,
`learner_gpus`): the same config runs on one CPU box or on a GPU cluster joined with
`ray start --head` / `--address` and `workers.ray_address`.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from llm_replay.buffer.checkpoint import CheckpointError
from llm_replay.buffer.rate_limit import TableClosed
from llm_replay.config import Config
from llm_replay.metrics import ComputeMeter, RoleClock
from llm_replay.models.loading import resolve_model_path
from llm_replay.runtime.async_core import (
    WorkerStats,
    account_delivery,
    account_learner_steps,
    add_counts,
)
from llm_replay.runtime.checkpoint import (
    ASYNC_STATE,
    LOOP_STATE,
    check_state,
    open_checkpoint,
    write_checkpoint,
)
from llm_replay.runtime.ingest import TABLE_DIR, WorkerError, WorkItem, WorkPlan
from llm_replay.runtime.layout import CHECKPOINT_DIR, METHOD_DIR, REPLAY_DIR
from llm_replay.runtime.loop import RunLoop, summarise_steps
from llm_replay.runtime.protocols import WorkerHealth
from llm_replay.runtime.ray_actors import GenerationActor, LearnerActor, TableActor
from llm_replay.runtime.rollouts import worker_seed
from llm_replay.runtime.shards import ShardFront, shard_config, shard_dirs

log = logging.getLogger(__name__)
POLL_SECONDS = 0.02


def _actor(cls: type, **options: Any) -> Any:
    """`ray.remote(cls).options(...)`, typed loosely: Ray's stubs do not model actor methods."""
    remote: Any = ray.remote(cls)
    return remote.options(**options)


@dataclass
class _Pending:
    kind: str  # "generate" or "deliver"
    worker: int
    item: WorkItem
    batch: Any = None
    info: dict[str, Any] | None = None


class RayWorkerHandle:
    """Driver-side `RolloutWorker` for one generation actor: start, stop, restart, health."""

    def __init__(self, index: int, config: Config, config_dict: dict[str, Any]) -> None:
        self.index, self.config, self.config_dict = index, config, config_dict
        self.actor: Any = None
        self.restarts = 0
        self.stats = WorkerStats()
        self.target_version = -1
        self.alive = False  # started and not seen dead since
        self.error: str | None = None

    def start(self) -> None:
        w = self.config.workers
        remote = _actor(  # two threads: a health ping is answered while it generates
            GenerationActor,
            num_cpus=w.cpus_per_worker,
            num_gpus=w.gpus_per_worker,
            max_concurrency=2,
        )
        seed = worker_seed(self.config.train.seed, self.index, 104729 * self.restarts)
        self.actor = remote.remote(self.config_dict, self.index, seed)
        self.alive = True

    def stop(self, timeout: float | None = None) -> None:
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)
            self.actor = None
        self.alive = False

    def restart(self, reason: str) -> None:
        if self.restarts >= self.config.workers.max_restarts:
            raise WorkerError(
                f"generation worker {self.index} died {self.restarts + 1} times "
                f"(workers.max_restarts = {self.config.workers.max_restarts}): {reason}"
            )
        log.warning("generation worker %d died (%s); restarting it", self.index, reason)
        self.stop()
        self.restarts += 1
        self.stats.policy_version = -1
        self.start()

    def update_weights(self, version: int) -> bool:
        """Weights are pushed with the next work item; records the version it will move to."""
        changed = version > self.target_version
        self.target_version = max(self.target_version, version)
        return changed

    def health(self) -> WorkerHealth:
        alive = False
        if self.actor is not None:
            try:
                ray.get(self.actor.ping.remote(), timeout=10)
                alive = True
            except (RayActorError, ray.exceptions.GetTimeoutError) as error:
                self.error = str(error)
        self.alive = alive
        return WorkerHealth(
            worker=self.index,
            alive=alive,
            policy_version=self.stats.policy_version,
            items_delivered=self.stats.items_delivered,
            rollouts_delivered=self.stats.rollouts_delivered,
            busy_seconds=self.stats.busy_seconds,
            idle_seconds=self.stats.idle_seconds,
            restarts=self.restarts,
            error=self.error,
        )


class RayTrainer(RunLoop):
    """Coordinates table, workers and learner actors; the shared run loop does the rest."""

    def __init__(self, config: Config, *, run_dir: Path | None = None) -> None:
        self._init_loop(config, run_dir)
        if config.workers.ray_address is None:
            resolve_model_path(config.model.path)  # a local run: name a missing model here
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=config.workers.ray_address, include_dashboard=False)
        self.config_dict = config.to_dict()
        w = config.workers
        self.shards: list[Any] = []
        if w.sharded:
            self.table: Any = self._sharded_table(config)
        else:
            self.table = _actor(TableActor, max_concurrency=64, num_cpus=0).remote(self.config_dict)
        self.learner: Any = _actor(
            LearnerActor, num_cpus=w.learner_cpus, num_gpus=w.learner_gpus, max_concurrency=2
        ).remote(self.config_dict, str(self.run_dir), self.table)
        try:
            parameters = ray.get(self.learner.parameters.remote())
        except BaseException:
            self._release()
            raise
        self.meter = ComputeMeter(parameters=parameters)
        self.clock = RoleClock()
        self.plan = WorkPlan(config.generation.prompts_per_step)
        self.workers = [RayWorkerHandle(i, config, self.config_dict) for i in range(w.count)]
        self._pending: dict[Any, _Pending] = {}
        self._busy_workers: set[int] = set()
        self._fresh_metrics: list[dict[str, float]] = []
        self._steps = 0
        self._started = False
        self.reward_counts: dict[str, int] = {}
        self.delivered_rollouts = 0
        self.final_table_inserts: int | None = None

    def _sharded_table(self, config: Config) -> Any:
        """K table actors (durable and restarted by Ray when `workers.table_fsync` is set) and
        the front that keeps their replay ratio (`runtime.shards`)."""
        w = config.workers
        durable = w.table_fsync is not None
        dirs = shard_dirs(self.run_dir, w.table_shards)
        if durable:  # the logs serve restarts within this run; a resume starts from a checkpoint
            shutil.rmtree(dirs[0].parent, ignore_errors=True)
        restarts = {"max_restarts": w.max_restarts} if durable else {}
        for index in range(w.table_shards):
            remote = _actor(TableActor, max_concurrency=64, num_cpus=0, **restarts)
            directory = str(dirs[index]) if durable else None
            self.shards.append(remote.remote(shard_config(config, index), directory, True))
        return _actor(ShardFront, max_concurrency=64, num_cpus=0).remote(
            self.config_dict, self.shards
        )

    @property
    def steps(self) -> int:
        return self._steps

    # ------------------------------------------------------------------ coordination
    def _start(self) -> None:
        if self._started:
            return
        for worker in self.workers:
            worker.start()
        try:  # the clock starts once every worker has loaded its model
            ray.get([worker.actor.ping.remote() for worker in self.workers])
        except (RayActorError, RayTaskError) as error:
            raise WorkerError(f"a generation worker failed to start: {error}") from error
        self.clock.start()
        self._started = True

    def _dispatch(self) -> None:
        if not self._started:
            return
        weights = None
        for worker in self.workers:
            if worker.index in self._busy_workers:
                continue
            if weights is None:
                weights = ray.get(self.learner.latest_weights.remote())
            worker.update_weights(weights[0])
            item = self.plan.take()
            batch_ref, info_ref = worker.actor.generate.options(num_returns=2).remote(
                asdict(item), weights
            )
            self._pending[info_ref] = _Pending("generate", worker.index, item, batch=batch_ref)
            self._busy_workers.add(worker.index)

    def _pump(self, timeout: float = POLL_SECONDS) -> None:
        """Hand out work to idle workers; route finished generations to the table; account."""
        self._dispatch()
        if not self._pending:
            time.sleep(timeout)
            return
        ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=timeout)
        for ref in ready:
            self._complete(ref, self._pending.pop(ref))

    def _complete(self, ref: Any, pending: _Pending) -> None:
        worker = self.workers[pending.worker]
        if pending.kind == "generate":
            try:
                info = ray.get(ref)
            except (RayActorError, RayTaskError) as error:
                self.plan.give_back(pending.item)
                self._busy_workers.discard(worker.index)
                worker.alive = isinstance(error, RayTaskError) and not isinstance(
                    error, RayActorError
                )
                if worker.alive:
                    raise WorkerError(
                        f"generation worker {worker.index} failed: {error}"
                    ) from error
                worker.restart(type(error).__name__)
                return
            batch = [pending.batch] if self.shards else pending.batch  # the front does not fetch
            deliver = self.table.deliver.remote(batch, pending.item.item_id)
            self._pending[deliver] = _Pending("deliver", worker.index, pending.item, info=info)
            return
        try:
            delivery = ray.get(ref)
        except RayTaskError as error:
            if isinstance(getattr(error, "cause", None), TableClosed):
                return
            raise
        info = pending.info
        assert info is not None
        self.plan.complete([pending.item.item_id])
        self._busy_workers.discard(worker.index)
        meter = ComputeMeter()
        meter.load_state_dict(info["meter"])
        self.meter.merge(meter)
        self._fresh_metrics.append(info["metrics"])
        add_counts(self.reward_counts, info["reward_counts"])
        self.delivered_rollouts += int(delivery["rollouts"])
        account_delivery(
            self.clock,
            worker.stats,
            rollouts=int(delivery["rollouts"]),
            busy=float(info["busy"]) + delivery["table_seconds"],
            idle=delivery["idle_seconds"],
            table=delivery["table_seconds"],
            weight_sync=float(info["weight_sync"]),
            policy_version=int(info["policy_version"]),
        )

    def _wait_for(self, ref: Any) -> Any:
        """`ray.get(ref)`, keeping the workers fed while it runs."""
        while not ray.wait([ref], timeout=0)[0]:
            self._pump()
        return ray.get(ref)

    def _supervise(self) -> None:
        """Restart workers found dead while holding no item (one holding an item is restarted when
        its result fails to come back)."""
        generating = set(self.generating())
        for worker in self.workers:
            if worker.index in generating:
                continue
            try:
                ray.get(worker.actor.ping.remote(), timeout=30)
            except RayActorError:
                worker.alive = False
                worker.restart("found dead by a health check")
            except ray.exceptions.GetTimeoutError:
                log.warning("generation worker %d did not answer a health check", worker.index)

    # ------------------------------------------------------------------ RunLoop hooks
    def train_iteration(self) -> dict[str, Any]:
        self._start()
        self._supervise()
        progress = self.schedule.progress(self.iteration, self.meter)
        raw, method_metrics = self._wait_for(
            self.learner.train_iteration.remote(self.meter.mu, progress)
        )
        steps = account_learner_steps(raw, self.meter, self.clock)
        self._steps += len(steps)
        self.iteration += 1
        fresh, self._fresh_metrics = self._fresh_metrics, []
        record: dict[str, Any] = summarise_steps(fresh, steps)
        record.update(method_metrics)
        record.update(self.async_metrics())
        return record

    def async_metrics(self) -> dict[str, float]:
        """Table stats, the limiter's position in its band, workers and the role clock."""
        out: dict[str, float] = ray.get(self.table.stats.remote())
        out["async/workers_alive"] = float(sum(w.alive for w in self.workers))
        out["async/worker_restarts"] = float(sum(w.restarts for w in self.workers))
        out.update(self.clock.metrics())
        return out

    def evaluate(self) -> dict[str, Any]:
        metrics: dict[str, Any] = self._wait_for(self.learner.evaluate.remote(self.iteration))
        return metrics

    def extra_summary(self) -> dict[str, Any]:
        metrics = self.async_metrics()
        metrics["async/rollouts_delivered"] = float(self.delivered_rollouts)
        return {"async": metrics}

    def generating(self) -> list[int]:
        """Indices of the workers with a work item being generated right now."""
        return sorted({p.worker for p in self._pending.values() if p.kind == "generate"})

    def health(self) -> list[WorkerHealth]:
        return [worker.health() for worker in self.workers]

    def reward_failures(self) -> dict[str, int]:
        evaluation: dict[str, int] = ray.get(self.learner.reward_failures.remote())
        return add_counts(dict(self.reward_counts), evaluation)

    def save_checkpoint(self) -> Path:
        def save_replay(directory: Path) -> dict[str, Any]:
            ray.get(self.learner.save_method.remote(str(directory / METHOD_DIR)))
            delivered = ray.get(self.table.save.remote(str(directory / TABLE_DIR)))
            self.plan.complete(delivered)  # in the saved table, whether or not we heard yet
            return {"work_plan": self.plan.state()}

        state = {
            **self._loop_state(),
            "learner_version": self._steps,
            "clock": self.clock.state_dict(),
            "reward_counts": self.reward_failures(),
        }
        return write_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            save_learner=lambda directory: ray.get(self.learner.save.remote(str(directory))),
            save_replay=save_replay,
            state=state,
        )

    def load_checkpoint(self) -> None:
        source, state = open_checkpoint(self.run_dir / CHECKPOINT_DIR)
        check_state(source, state, LOOP_STATE)
        if "work_plan" not in state:
            raise CheckpointError(f"{source}: not a checkpoint of an asynchronous run")
        check_state(source, state, ASYNC_STATE)
        ray.get(self.learner.load.remote(str(source), int(state["learner_version"])))
        ray.get(self.table.load.remote(str(source / REPLAY_DIR / TABLE_DIR)))
        self._steps = int(state["learner_version"])
        self.clock.load_state_dict(state["clock"])
        self.plan.load_state(state["work_plan"])
        evaluation = ray.get(self.learner.reward_failures.remote())
        self.reward_counts = {
            k: int(v) - int(evaluation.get(k, 0)) for k, v in state["reward_counts"].items()
        }
        self._restore_loop(state)

    def close(self) -> None:
        """Stop accepting rollouts, account for every delivery already made, release the actors."""
        self.clock.pause()
        ray.get(self.table.close.remote())
        for ref, pending in list(self._pending.items()):
            if pending.kind == "deliver":
                try:
                    ray.wait([ref], timeout=30)
                    self._complete(ref, pending)
                except (RayTaskError, RayActorError):
                    pass
        self._pending.clear()
        stats = ray.get(self.table.stats.remote())
        key = "intake/inserts" if "intake/inserts" in stats else "buffer/inserts"  # rounds mode
        self.final_table_inserts = int(stats[key])
        for worker in self.workers:
            worker.stop()
        self._release()

    def _release(self) -> None:
        for actor in (self.learner, self.table, *self.shards):
            ray.kill(actor, no_restart=True)
        if self._owns_ray:
            ray.shutdown()
