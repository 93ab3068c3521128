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

import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llm_replay.algorithms.losses import LossParams
from llm_replay.config import Config
from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.learner import Learner, LearnerSettings, sample_metrics
from llm_replay.metrics import ComputeMeter, evaluate, truncate_log
from llm_replay.models import encode_prompts, load_policy
from llm_replay.rollout import RolloutBatch
from llm_replay.runtime.checkpoint import (
    check_state,
    load_training_checkpoint,
    save_training_checkpoint,
)
from llm_replay.runtime.loop import CHECKPOINT_DIR, SUMMARY_FILE, RunLoop, summarise_steps
from llm_replay.runtime.rollouts import RolloutMaker, prompt_indices
from llm_replay.runtime.strategies import RLEP, AutoReplay, build_strategy
from llm_replay.tasks import DatasetTask, ReasoningGymTask, SafeScorer, Task

log = logging.getLogger(__name__)


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


class SyncTrainer(RunLoop):
    """Builds every part from a `Config` and runs the loop; `run()` returns the summary."""

    def __init__(self, config: Config, *, run_dir: Path | None = None) -> None:
        self._init_loop(config, run_dir)
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
        self.maker = RolloutMaker(
            generator=self.generator,
            tokenizer=self.tokenizer,
            problems=self.task.train,
            prompts=self.train_prompts,
            scorer=self.scorer,
            sampling=self.sampling,
            group_size=g.group_size,
            advantage=a.advantage,
            correct_threshold=self.task.correct_threshold,
        )
        self.prompts_drawn = 0
        self.next_group = 0

    # ------------------------------------------------------------------ helpers
    @property
    def steps(self) -> int:
        return self.learner.version

    def reward_failures(self) -> dict[str, int]:
        return dict(vars(self.scorer.counts))

    def close(self) -> None:
        self.scorer.close()

    def _prompt_indices(self) -> np.ndarray:
        """The next `prompts_per_step` prompts of the run's seeded order."""
        k = self.config.generation.prompts_per_step
        indices = prompt_indices(
            self.config.train.seed, len(self.train_prompts), self.prompts_drawn, k
        )
        self.prompts_drawn += k
        return indices

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
        indices = self._prompt_indices()
        batch, metrics = self.maker.make(indices, self.next_group, self.meter)
        self.next_group += len(indices)
        return batch, metrics

    def train_iteration(self) -> dict[str, Any]:
        fresh, record = self.generate_rollouts()
        steps: list[dict[str, float]] = []
        with self.meter.time("training"):
            for sample in self.strategy.batches(fresh):
                step = self.learner.step(sample) | sample_metrics(sample)
                steps.append(step)
                self.meter.add_training_step(len(sample), step)
                self.strategy.set_policy_version(self.learner.version)
        self._publish()
        self.iteration += 1
        if isinstance(self.strategy, RLEP) and self.strategy.restart_due():
            self._restart_from_base()
        record.update(summarise_steps(steps))
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
            "eval_pending": self.eval_pending,
            "reward_counts": vars(self.scorer.counts),
        }

    def save_checkpoint(self) -> Path:
        return save_training_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            model=self.model,
            optimizer=self.learner.optimizer,
            rng=self.generator.rng,
            state=self._state(),
            save_replay=self._save_replay,
        )

    def _save_replay(self, directory: Path) -> None:
        self.strategy.save(directory)

    def _load_replay(self, directory: Path, state: dict[str, Any]) -> None:
        self.strategy.load(directory)

    def load_checkpoint(self) -> None:
        source, state = load_training_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            model=self.model,
            optimizer=self.learner.optimizer,
            rng=self.generator.rng,
        )
        check_state(
            source,
            state,
            {
                "next_group": int,
                "prompts_drawn": int,
                "generator_version": int,
                "reward_counts": dict,
            },
        )
        self._load_replay(source / "replay", state)
        self.iteration = int(state["iteration"])
        self.next_group = int(state["next_group"])
        self.prompts_drawn = int(state["prompts_drawn"])
        self.learner.version = int(state["learner_version"])
        self.generator.policy_version = int(state["generator_version"])
        self.meter.load_state_dict(state["meter"])
        self.evals = list(state["evals"])
        self.eval_pending = bool(state.get("eval_pending", False))
        for key, value in state["reward_counts"].items():
            setattr(self.scorer.counts, key, int(value))
        truncate_log(self.run_dir, self.iteration)
        log.info("resumed %s at iteration %d", self.run_dir, self.iteration)


def train(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Build a `SyncTrainer` from `config` and run it."""
    return SyncTrainer(config).run(**kwargs)


__all__ = ["CHECKPOINT_DIR", "SUMMARY_FILE", "SyncTrainer", "build_task", "train"]
