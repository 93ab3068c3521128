"""The synchronous training loop: generate → score → advantages → table → batches → steps → publish.

One iteration: draw `prompts_per_step` train problems, generate `group_size` completions each with
the current weights, score them, compute group advantages (once, at generation), hand the fresh
rollouts to the replay strategy, take a gradient step for every batch it yields (advancing the
policy version, which ages stored rollouts), then publish the weights to the generator. The
on-policy baseline is this loop with a FIFO queue and one use per rollout.

Deterministic for a seed on CPU: prompts come from a seeded per-epoch permutation, sampling from
one `torch.Generator`, tables from their own seeded generators, and evaluation from its own RNG.
A checkpoint holds all of them, so a resumed run logs exactly what an uninterrupted one does.
Generation and training share one model object here (same device, same process), so publishing
the weights is bumping the generator's policy version.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.algorithms.losses import LossParams
from llm_replay.config import Config
from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.learner import Learner, LearnerSettings
from llm_replay.metrics import ComputeMeter, MetricsLogger, evaluate, truncate_log
from llm_replay.metrics.compute import cost_on_basis
from llm_replay.models import encode_prompts, load_policy
from llm_replay.rollout import RolloutBatch
from llm_replay.runtime.checkpoint import load_training_checkpoint, save_training_checkpoint
from llm_replay.runtime.strategies import RLEP, AutoReplay, build_strategy
from llm_replay.tasks import DatasetTask, ReasoningGymTask, SafeScorer, Task

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "checkpoint"
SUMMARY_FILE = "summary.json"


def build_task(config: Config) -> Task:
    t = config.task
    if t.kind == "dataset":
        assert t.path is not None
        return DatasetTask(
            t.path,
            eval_path=t.eval_path,
            eval_fraction=t.eval_fraction,
            seed=t.seed,
            prompt_field=t.prompt_field,
            answer_field=t.answer_field,
            correct_threshold=t.correct_threshold,
        )
    return ReasoningGymTask(
        t.dataset,
        params=t.params,
        train_size=t.train_size,
        eval_size=t.eval_size,
        seed=t.seed,
        eval_seed=t.eval_seed,
        prompt_template=t.prompt_template,
        strip_spaces=t.strip_spaces,
        correct_threshold=t.correct_threshold,
    )


def _make_optimizer(model: Any, config: Config) -> torch.optim.Optimizer:
    o = config.optim
    return torch.optim.AdamW(
        model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay
    )


class SyncTrainer:
    """Builds every part from a `Config` and runs the loop; `run()` returns the summary."""

    def __init__(self, config: Config, *, run_dir: Path | None = None) -> None:
        self.config = config
        self.run_dir = Path(run_dir) if run_dir is not None else config.run_dir
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        torch.manual_seed(config.train.seed)
        self.task = build_task(config)
        self.scorer = SafeScorer(
            self.task,
            timeout_s=config.task.reward_timeout_s,
            failure_reward=config.task.failure_reward,
        )
        self.model, self.tokenizer = load_policy(
            config.model.path, device=config.model.device, dtype=config.model.dtype
        )
        g = config.generation
        self.sampling = SamplingParams(g.max_new_tokens, g.temperature, g.top_k, g.top_p)
        self.generator = HFGenerator(
            self.model,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            seed=config.train.seed,
        )
        a = config.algorithm
        self.settings = LearnerSettings(
            loss=a.loss,
            aggregation=a.aggregation,
            loss_params=LossParams(**{f.name: getattr(a, f.name) for f in fields(LossParams)}),
            temperature=g.temperature,
            kl_coef=a.kl_coef,
            entropy_coef=a.entropy_coef,
            grad_clip=config.optim.grad_clip,
            micro_batch_size=config.train.micro_batch_size,
            use_sampling_weights=a.use_sampling_weights,
            sum_norm_length=g.max_new_tokens,
        )
        self.learner = Learner(self.model, _make_optimizer(self.model, config), self.settings)
        self.strategy = build_strategy(config)
        # only RLEP restarts from the base weights; nobody else pays for a second copy
        self.base_state = (
            {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            if isinstance(self.strategy, RLEP)
            else None
        )
        if isinstance(self.strategy, AutoReplay):
            self.strategy.mu_source = lambda: self.meter.mu
        self.meter = ComputeMeter(parameters=sum(p.numel() for p in self.model.parameters()))
        chat = config.model.chat_template
        self.train_prompts = encode_prompts(
            self.tokenizer, [p.prompt for p in self.task.train], chat
        )
        eval_problems = list(self.task.eval[: config.eval.size])
        self.eval_problems = eval_problems
        self.eval_prompts = encode_prompts(self.tokenizer, [p.prompt for p in eval_problems], chat)
        self.iteration = 0
        self.prompts_drawn = 0
        self.next_group = 0
        self.evals: list[dict[str, float]] = []
        self.wall_start = time.perf_counter()

    # ------------------------------------------------------------------ helpers
    def _prompt_indices(self) -> np.ndarray:
        """The next prompts: consecutive slices of a seeded permutation per epoch."""
        n, k = len(self.train_prompts), self.config.generation.prompts_per_step
        start = self.prompts_drawn
        self.prompts_drawn += k
        out: list[int] = []
        while len(out) < k:
            epoch, offset = divmod(start + len(out), n)
            perm = np.random.default_rng([self.config.train.seed, epoch]).permutation(n)
            out.extend(perm[offset : offset + k - len(out)].tolist())
        return np.asarray(out, dtype=np.int64)

    def _publish(self) -> None:
        self.generator.policy_version = self.learner.version

    def _restart_from_base(self) -> None:
        """RLEP phase II starts from the base model with a fresh optimizer."""
        assert self.base_state is not None
        self.model.load_state_dict(self.base_state)
        self.learner.optimizer = _make_optimizer(self.model, self.config)
        log.info(
            "RLEP: phase I done after %d iterations; restarting from the base model", self.iteration
        )

    def evaluate(self) -> dict[str, float]:
        e = self.config.eval
        metrics = evaluate(
            self.generator,
            self.tokenizer,
            self.eval_prompts,
            self.eval_problems,
            self.scorer,
            sampling=self.sampling,
            pass_k=e.pass_k,
            pass_size=e.pass_size,
            seed=self.config.train.seed + 7919 * (self.iteration + 1),
        )
        return metrics

    # ------------------------------------------------------------------ one iteration
    def generate_rollouts(self) -> tuple[RolloutBatch, dict[str, float]]:
        """One iteration's fresh groups; with dynamic sampling, only groups whose rewards differ.

        Dynamic sampling (DAPO) drops zero-variance groups (no learning signal under group
        baselines) and generates more, up to `dynamic_sampling_rounds` extra rounds, until
        `prompts_per_step` groups are kept; everything generated is paid for in the meter.
        """
        g = self.config.generation
        batch, metrics = self._generate_groups()
        if not g.dynamic_sampling:
            return batch, metrics
        generated = kept_groups = 0
        parts: list[RolloutBatch] = []
        for round_index in range(1 + g.dynamic_sampling_rounds):
            if round_index > 0:
                batch = self._generate_groups()[0]
            generated += len(batch) // g.group_size
            rewards = batch.rewards.reshape(-1, g.group_size)
            informative = np.flatnonzero(rewards.std(1) > 0)[: g.prompts_per_step - kept_groups]
            rows = (informative[:, None] * g.group_size + np.arange(g.group_size)).ravel()
            if rows.size:
                parts.append(batch.select(rows))
            kept_groups += len(informative)
            if kept_groups >= g.prompts_per_step:
                break
        metrics["generation/groups_generated"] = float(generated)
        metrics["generation/groups_kept"] = float(kept_groups)
        if not parts:  # every group was uninformative: train on the last round as it is
            return batch, metrics
        return RolloutBatch.concat(parts), metrics

    def _generate_groups(self) -> tuple[RolloutBatch, dict[str, float]]:
        g = self.config.generation
        indices = self._prompt_indices()
        problems = [self.task.train[i] for i in indices]
        prompts = [self.train_prompts[i] for i in indices]
        with self.meter.time("generation"):
            out = self.generator.generate(prompts, g.group_size, self.sampling)
        with self.meter.time("scoring"):
            texts = self.tokenizer.batch_decode(out.completions(), skip_special_tokens=True)
            rewards = self.scorer.score(texts, [problems[i] for i in out.prompt_index])
        correct = rewards >= self.task.correct_threshold
        groups = self.next_group + out.prompt_index
        self.next_group += len(prompts)
        batch = RolloutBatch.from_flat(
            prompt_ids=np.concatenate([np.asarray(prompts[i], np.int32) for i in out.prompt_index]),
            prompt_lengths=np.asarray([len(prompts[i]) for i in out.prompt_index], np.int32),
            completion_ids=out.completion_ids,
            completion_lengths=out.completion_lengths,
            behaviour_logprobs=out.behaviour_logprobs,
            rewards=rewards,
            group_ids=groups,
            policy_versions=np.full(len(out), out.policy_version, np.int64),
            correct=correct.astype(np.int8),
            finish_reasons=out.finish_reasons,
        )
        batch = batch.with_advantages(
            group_advantages(rewards, groups, self.config.algorithm.advantage)
        )
        self.meter.add(
            prompts_generated=len(prompts),
            rollouts_generated=len(out),
            tokens_generated=int(out.completion_lengths.sum()),
            prompt_tokens=out.prompt_tokens,
            padded_generation_tokens=out.padded_tokens,
            reward_calls=len(texts),
        )
        per_group = rewards.reshape(len(prompts), g.group_size)
        metrics = {
            "reward/mean": float(rewards.mean()),
            "reward/correct_rate": float(correct.mean()),
            "reward/zero_variance_groups": float((per_group.std(1) == 0).mean()),
            "reward/failures": float(self.scorer.counts.failures),
            "generation/mean_length": float(out.completion_lengths.mean()),
            "generation/stop_rate": float(np.mean([f == "stop" for f in out.finish_reasons])),
            "generation/entropy": float(out.entropies.mean()),
        }
        return batch, metrics

    def train_iteration(self) -> dict[str, Any]:
        fresh, record = self.generate_rollouts()
        steps: list[dict[str, float]] = []
        with self.meter.time("training"):
            for sample in self.strategy.batches(fresh):
                step = self.learner.step(sample)
                step["train/age_mean"] = float(sample.ages.mean())
                step["train/age_max"] = float(sample.ages.max())
                step["train/replayed_fraction"] = float((sample.times_sampled > 1).mean())
                steps.append(step)
                self.meter.add(
                    rollouts_trained=len(sample),
                    tokens_trained=int(step["train/tokens"]),
                    completion_tokens_trained=int(step["train/completion_tokens"]),
                    forward_only_tokens=int(step["train/forward_only_tokens"]),
                    gradient_steps=1,
                )
                self.strategy.set_policy_version(self.learner.version)
        self._publish()
        self.iteration += 1
        if isinstance(self.strategy, RLEP) and self.strategy.restart_due():
            self._restart_from_base()
        for key in sorted({k for s in steps for k in s}):
            values = [s[key] for s in steps if key in s]
            record[key] = max(values) if key.endswith("_max") else float(np.mean(values))
        record["train/steps_this_iteration"] = float(len(steps))
        record.update(self.strategy.metrics())
        return record

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "next_group": self.next_group,
            "prompts_drawn": self.prompts_drawn,
            "learner_version": self.learner.version,
            "generator_version": self.generator.policy_version,
            "meter": self.meter.state_dict(),
            "evals": self.evals,
            "reward_counts": vars(self.scorer.counts),
        }

    def save_checkpoint(self) -> Path:
        return save_training_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            model=self.model,
            optimizer=self.learner.optimizer,
            rng=self.generator.rng,
            state=self._state(),
            save_replay=self.strategy.save,
        )

    def load_checkpoint(self) -> None:
        source = self.run_dir / CHECKPOINT_DIR
        state = load_training_checkpoint(
            source, model=self.model, optimizer=self.learner.optimizer, rng=self.generator.rng
        )
        self.strategy.load(source / "replay")
        self.iteration = int(state["iteration"])
        self.next_group = int(state["next_group"])
        self.prompts_drawn = int(state["prompts_drawn"])
        self.learner.version = int(state["learner_version"])
        self.generator.policy_version = int(state["generator_version"])
        self.meter.load_state_dict(state["meter"])
        self.evals = list(state["evals"])
        for key, value in state["reward_counts"].items():
            setattr(self.scorer.counts, key, int(value))
        truncate_log(self.run_dir, self.iteration)
        log.info("resumed %s at iteration %d", self.run_dir, self.iteration)

    # ------------------------------------------------------------------ the run
    def _spent(self) -> float:
        """Compute spent so far on `train.budget_basis` (the axis of budgets and eval intervals)."""
        return cost_on_basis(self.config.train.budget_basis, self.meter.metrics())

    def _done(self) -> bool:
        t = self.config.train
        if self.iteration >= t.iterations:
            return True
        if t.compute_seconds is not None and self.meter.total_seconds >= t.compute_seconds:
            return True
        return t.compute_budget is not None and self._spent() >= t.compute_budget

    def _crossed(self, spent_before: float) -> bool:
        """True when this iteration's compute crossed a multiple of `eval.every_compute`."""
        step = self.config.eval.every_compute
        return step is not None and int(self._spent() // step) > int(spent_before // step)

    def _eval_record(self, logger: MetricsLogger) -> dict[str, Any]:
        metrics = self.evaluate()
        record: dict[str, Any] = {
            "kind": "eval",
            "iteration": self.iteration,
            "steps": self.learner.version,
            **self.meter.metrics(),
            **metrics,
        }
        self.evals.append({"iteration": self.iteration, **record})
        logger.log(record)
        return record

    def run(
        self,
        *,
        resume: bool = False,
        on_iteration: Callable[[SyncTrainer, dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Train until the iteration or compute budget; write summary.json; return it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            self.load_checkpoint()
        elif (self.run_dir / "metrics.jsonl").exists():
            (self.run_dir / "metrics.jsonl").unlink()
        (self.run_dir / "config.yaml").write_text(
            yaml.safe_dump(self.config.to_dict(), sort_keys=False)
        )
        logger = MetricsLogger(self.run_dir, tensorboard=self.config.log.tensorboard)
        every, ckpt = self.config.eval.every, self.config.log.checkpoint_every
        at_boundary = True
        try:
            if not self.evals:
                self._eval_record(logger)
            while not self._done():
                at_boundary = False
                spent_before = self._spent()
                record = self.train_iteration()
                record = {
                    "kind": "train",
                    "iteration": self.iteration,
                    "steps": self.learner.version,
                    **record,
                    **self.meter.metrics(),
                }
                logger.log(record)
                at_boundary = True
                if self.iteration % every == 0 or self._done() or self._crossed(spent_before):
                    record.update(self._eval_record(logger))
                if ckpt and self.iteration % ckpt == 0:
                    self.save_checkpoint()
                if on_iteration is not None:
                    on_iteration(self, record)
            if self.evals[-1]["iteration"] != self.iteration:
                self._eval_record(logger)
        except KeyboardInterrupt:
            if at_boundary:
                self.save_checkpoint()
                log.warning(
                    "interrupted after iteration %d; checkpoint saved, resume with --resume",
                    self.iteration,
                )
            raise
        finally:
            logger.close()
            self.scorer.close()
        self.save_checkpoint()
        summary = self.summary()
        (self.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
        return summary

    def summary(self) -> dict[str, Any]:
        first, last = self.evals[0], self.evals[-1]
        accuracies = [e["eval/accuracy"] for e in self.evals]
        return {
            "name": self.config.name,
            "strategy": self.config.replay.strategy,
            "loss": self.config.algorithm.loss,
            "base_accuracy": first["eval/accuracy"],
            "final_accuracy": last["eval/accuracy"],
            "best_accuracy": max(accuracies),
            "final_eval": {k: v for k, v in last.items() if k.startswith("eval/")},
            "iterations": self.iteration,
            "steps": self.learner.version,
            "compute_seconds": {"total": self.meter.total_seconds, **self.meter.seconds},
            "mu": self.meter.mu,
            "flops": self.meter.flops,
            "counts": dict(self.meter.counts),
            "reward_failures": vars(self.scorer.counts),
            "wall_seconds": time.perf_counter() - self.wall_start,
            "evals": [
                {
                    "iteration": e["iteration"],
                    "steps": e["steps"],
                    "compute_seconds": e["compute/seconds"],
                    "accuracy": e["eval/accuracy"],
                }
                for e in self.evals
            ],
        }


def train(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Build a `SyncTrainer` from `config` and run it."""
    return SyncTrainer(config).run(**kwargs)


__all__ = ["SyncTrainer", "build_task", "train"]
