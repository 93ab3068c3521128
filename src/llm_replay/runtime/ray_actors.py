"""The Ray actors: the table, a generation worker, the learner. Plain classes; `ray.py` wraps them
with `ray.remote` and places them with Ray resources.

Each actor rebuilds what it needs from the run's config (a plain dict, so the same YAML drives a
laptop and a cluster): the table actor builds the rate-limited async table, a worker loads the
policy and the task, the learner builds a `SyncTrainer` for its model, optimizer and evaluation.
Nothing here is specific to one machine; a cluster needs the package and the model path on every
node, and the run directory on storage the learner and the driver share (checkpoints are written
by the actors that hold the state).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from llm_replay.buffer import ReplayTable, Sample
from llm_replay.config import config_from_dict
from llm_replay.learner import sample_metrics
from llm_replay.metrics import ComputeMeter
from llm_replay.rollout import RolloutBatch
from llm_replay.runtime.checkpoint import load_learner_files, save_learner_files
from llm_replay.runtime.ingest import IngestGate, WorkItem, build_async_table


def _threads(cpus: float) -> None:
    torch.set_num_threads(max(1, int(cpus)))


class TableActor:
    """The replay table behind a threaded actor: blocking delivers and samples wait on each other
    exactly as they do in one process."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.gate = IngestGate(build_async_table(config_from_dict(config)))

    @property
    def table(self) -> ReplayTable:
        return self.gate.table

    def deliver(self, batch: RolloutBatch, item_id: int) -> dict[str, float]:
        return asdict(self.gate.deliver(batch, item_id))

    def sample(self, batch_size: int) -> tuple[Sample, float, float]:
        """(sample, seconds blocked by the limiter, seconds inside the table)."""
        start = time.perf_counter()
        self.table.wait_for_sample(batch_size)
        idle = time.perf_counter() - start
        start = time.perf_counter()
        sample = self.table.sample(batch_size)
        return sample, idle, time.perf_counter() - start

    def set_policy_version(self, version: int) -> int:
        return self.table.set_policy_version(version)

    def stats(self) -> dict[str, float]:
        stats = self.table.stats()
        limiter = self.table.rate_limiter
        out = {k: float(v) for k, v in stats.metrics().items()}
        out["async/limiter_diff"] = stats.inserts * limiter.samples_per_insert - stats.samples
        out["async/limiter_min_diff"] = limiter.min_diff
        out["async/limiter_max_diff"] = limiter.max_diff
        return out

    def save(self, directory: str) -> list[int]:
        """Save the table; returns the item ids delivered since the previous save."""
        ids: list[int] = self.gate.save(Path(directory))["delivered_ids"]
        return ids

    def load(self, directory: str) -> None:
        self.gate = IngestGate(ReplayTable.load(directory))

    def close(self) -> None:
        self.table.close()


class GenerationActor:
    """A generation worker: its own copy of the policy on its own device; returns scored groups."""

    def __init__(self, config: dict[str, Any], index: int, seed: int) -> None:
        from llm_replay.models import encode_prompts, load_policy
        from llm_replay.runtime.rollouts import RolloutMaker
        from llm_replay.runtime.sync import build_task

        cfg = config_from_dict(config)
        _threads(cfg.workers.cpus_per_worker)
        self.index, self.config = index, cfg
        device = cfg.workers.device or cfg.model.device
        model, tokenizer = load_policy(cfg.model.path, device=device, dtype=cfg.model.dtype)
        model.eval().requires_grad_(False)
        task = build_task(cfg)
        prompts = encode_prompts(tokenizer, [p.prompt for p in task.train], cfg.model.chat_template)
        self.maker = RolloutMaker.for_worker(
            cfg, model=model, tokenizer=tokenizer, task=task, prompts=prompts, seed=seed
        )
        self.generator, self.scorer = self.maker.generator, self.maker.scorer

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
        work = WorkItem(**item)
        meter = ComputeMeter()
        failures_before = self.scorer.counts.failures
        start = time.perf_counter()
        indices = work.indices(
            self.config.train.seed,
            len(self.maker.problems),
            self.config.generation.prompts_per_step,
        )
        batch, metrics = self.maker.make(indices, work.first_group, meter)
        info = {
            "meter": meter.state_dict(),
            "metrics": metrics,
            "busy": time.perf_counter() - start + synced,
            "weight_sync": synced,
            "reward_failures": self.scorer.counts.failures - failures_before,
            "policy_version": self.generator.policy_version,
        }
        return batch, info

    def ping(self) -> int:
        return self.generator.policy_version


class LearnerActor:
    """The learner: model, optimizer and evaluation (a `SyncTrainer` without its generation loop),
    sampling from the table actor and publishing weights to the object store."""

    def __init__(self, config: dict[str, Any], run_dir: str, table: Any) -> None:
        from llm_replay.runtime.sync import SyncTrainer

        cfg = config_from_dict(config)
        _threads(cfg.workers.learner_cpus)
        self.trainer = SyncTrainer(cfg, run_dir=Path(run_dir))
        self.table = table
        self.batch_size = cfg.train.batch_size
        self.publish_every = cfg.workers.publish_every
        self._weights: tuple[int, list[Any]] = (-1, [None])
        self.publish()

    def parameters(self) -> int:
        return sum(p.numel() for p in self.trainer.model.parameters())

    def publish(self) -> None:
        import ray

        state = {k: v.detach().to("cpu") for k, v in self.trainer.model.state_dict().items()}
        self._weights = (self.trainer.learner.version, [ray.put(state)])

    def latest_weights(self) -> tuple[int, list[Any]]:
        return self._weights

    def train_steps(self, count: int) -> list[dict[str, float]]:
        """`count` gradient steps on batches from the table; per step, metrics and accounting."""
        import ray

        learner, out = self.trainer.learner, []
        for _ in range(count):
            call = time.perf_counter()
            sample, idle, _ = ray.get(self.table.sample.remote(self.batch_size))
            start = time.perf_counter()
            fetched = start - call - idle  # table work, the actor call and the batch transfer
            step = learner.step(sample)
            trained = time.perf_counter()
            ray.get(self.table.set_policy_version.remote(learner.version))
            table_seconds = fetched + time.perf_counter() - trained
            synced = 0.0
            if learner.version % self.publish_every == 0:
                before = time.perf_counter()
                self.publish()
                synced = time.perf_counter() - before
            step.update(sample_metrics(sample))
            step.update(
                {
                    "_busy": time.perf_counter() - start + fetched,
                    "_idle": idle,
                    "_table": table_seconds,
                    "_weight_sync": synced,
                    "_rollouts": float(len(sample)),
                }
            )
            out.append(step)
        return out

    def evaluate(self, iteration: int) -> dict[str, float]:
        self.trainer.iteration = iteration
        self.trainer.generator.policy_version = self.trainer.learner.version
        return self.trainer.evaluate()

    def save(self, directory: str) -> None:
        t = self.trainer
        save_learner_files(
            Path(directory), model=t.model, optimizer=t.learner.optimizer, rng=t.generator.rng
        )

    def load(self, directory: str, version: int) -> None:
        t = self.trainer
        # the driver resolved and verified `directory` (RayTrainer.load_checkpoint)
        load_learner_files(
            Path(directory), model=t.model, optimizer=t.learner.optimizer, rng=t.generator.rng
        )
        t.learner.version = version
        self.publish()

    def reward_failures(self) -> dict[str, int]:
        return dict(vars(self.trainer.scorer.counts))
