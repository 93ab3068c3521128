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
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.config import Config
from llm_replay.data.batch import RolloutBatch
from llm_replay.learner import sample_metrics
from llm_replay.metrics import ComputeMeter
from llm_replay.runtime.adaptive_rollouts import AdaptiveRollouts
from llm_replay.runtime.checkpoint import (
    check_state,
    load_training_checkpoint,
    save_learner_files,
    write_checkpoint,
)
from llm_replay.runtime.components import build_learner_parts, build_optimizer
from llm_replay.runtime.layout import CHECKPOINT_DIR, REPLAY_DIR
from llm_replay.runtime.loop import RunLoop, summarise_steps
from llm_replay.runtime.prompt_skip import PromptSkipper, uninformative_groups
from llm_replay.runtime.reward_refresh import RewardModelRefresh, RunRewardModel
from llm_replay.runtime.rollouts import prompt_indices
from llm_replay.tasks.reward_model import ModelScorer

log = logging.getLogger(__name__)


class SyncTrainer(RunLoop):
    """Composes a run's parts (`runtime.components`) and runs the loop; `run()` returns the
    summary."""

    def __init__(self, config: Config, *, run_dir: Path | None = None) -> None:
        if config.preference.enabled and type(self) is SyncTrainer:
            raise ValueError(
                "preference.enabled = true: a preference run is a PreferenceTrainer "
                "(runtime.build_trainer builds the right trainer for a config)"
            )
        self._init_loop(config, run_dir)
        parts = build_learner_parts(config, threads=config.train.threads, generates=True)
        assert parts.maker is not None
        self.policy, self.learner, self.replay = parts.policy, parts.learner, parts.replay
        self.generator, self.evaluator, self.maker = parts.generator, parts.evaluator, parts.maker
        self.task, self.model, self.tokenizer = (
            self.policy.task,
            self.policy.model,
            self.policy.tokenizer,
        )
        self.scorer = self.maker.scorer
        self.meter = ComputeMeter(parameters=self.policy.parameters)
        self.reward_refresh: RewardModelRefresh | None = None
        if isinstance(self.scorer, ModelScorer):
            self.meter.reward_model_parameters = self.scorer.model.parameters
            self.reward_refresh = RewardModelRefresh(
                config.reward_model,
                self.scorer,
                self.evaluator.scorer,
                self.tokenizer,
                seed=config.train.seed,
            )
            self.replay.method.context.services.stored_rewards = RunRewardModel(
                self.scorer, self.tokenizer, self.meter, config.reward_model.success_threshold
            )
        # only a method that restarts from the base weights pays for a second copy of them
        self.base_state = (
            {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            if self.replay.method.restarts
            else None
        )
        self.train_prompts = self.policy.train_prompts
        self.prompts_drawn = 0
        self.next_group = 0
        skip = config.generation.skip
        self.skipper = (
            PromptSkipper(skip, len(self.train_prompts), config.train.seed)
            if skip.enabled
            else None
        )
        adaptive = config.generation.adaptive
        self.adaptive = AdaptiveRollouts(adaptive) if adaptive.enabled else None

    # ------------------------------------------------------------------ helpers
    @property
    def steps(self) -> int:
        return self.learner.version

    def reward_failures(self) -> dict[str, int]:
        return dict(vars(self.scorer.counts))

    def close(self) -> None:
        self.scorer.close()

    def _prompt_indices(self) -> np.ndarray:
        """The next `prompts_per_step` prompts of the run's seeded order (those the prompt
        skipper lets through, when `generation.skip` is on)."""
        k = self.config.generation.prompts_per_step
        chosen: list[np.ndarray] = []
        while (have := sum(len(c) for c in chosen)) < k:
            indices = prompt_indices(
                self.config.train.seed, len(self.train_prompts), self.prompts_drawn, k - have
            )
            self.prompts_drawn += len(indices)
            chosen.append(
                indices if self.skipper is None else indices[self.skipper.choose(indices)]
            )
        return np.concatenate(chosen)

    def _publish(self) -> None:
        self.generator.policy_version = self.learner.version

    def _restart_from_base(self) -> None:
        """RLEP phase II starts from the base model with a fresh optimizer."""
        assert self.base_state is not None
        self.model.load_state_dict(self.base_state)
        self.learner.optimizer = build_optimizer(self.config, self.model)
        self.learner.gate = replace(self.learner.gate, reference=0.0, seen=0, gated=0)
        log.info(
            "RLEP: phase I done after %d iterations; restarting from the base model", self.iteration
        )

    def evaluate(self) -> dict[str, Any]:
        return self.evaluator(self.iteration)

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
        batch, metrics = self.maker.make(indices, self.next_group, self.meter, self.adaptive)
        generated = batch  # what the watchers below see: not the rows response reuse put in
        if self.adaptive is not None and self.adaptive.reused_rows.any():
            generated = batch.select(np.flatnonzero(~self.adaptive.reused_rows))
        if self.reward_refresh is not None:
            row_prompts = indices[generated.group_ids - self.next_group]
            rows = [self.task.train[int(i)] for i in row_prompts]
            metrics.update(self.reward_refresh.observe(generated, rows))
        groups = self.next_group + np.arange(len(indices))
        self.next_group += len(indices)
        if self.skipper is not None:
            self.skipper.observe(indices, uninformative_groups(generated, groups))
            metrics.update(self.skipper.metrics())
        return batch, metrics

    def train_iteration(self) -> dict[str, Any]:
        refreshed: dict[str, float] = {}
        if self.reward_refresh is not None and self.reward_refresh.due(self.iteration):
            refreshed = self.reward_refresh.refresh(self.meter)
        fresh, record = self.generate_rollouts()
        record.update(refreshed)
        progress = self.schedule.progress(self.iteration, self.meter)
        steps: list[dict[str, float]] = []
        with self.meter.time("training"):
            for sample in self.replay.round(fresh, mu=self.meter.mu, progress=progress):
                step = self.learner.step(sample) | sample_metrics(sample)
                steps.append(step)
                self.meter.add_training_step(len(sample), step)
                self.replay.after_step(sample, step, self.learner.version)
        self._publish()
        self.iteration += 1
        if self.replay.restart_due():
            self._restart_from_base()
        record.update(summarise_steps(steps))
        record.update(self.replay.metrics())
        return record

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> dict[str, Any]:
        return {
            **self._loop_state(),
            "next_group": self.next_group,
            "prompts_drawn": self.prompts_drawn,
            "learner_version": self.learner.version,
            "generator_version": self.generator.policy_version,
            "reward_counts": vars(self.scorer.counts),
            **{key: part.state() for key, _, part in self._optional_parts()},
            **(
                {} if self.reward_refresh is None else {"reward_model": self.reward_refresh.state()}
            ),
        }

    def _optional_parts(self) -> list[tuple[str, str, Any]]:
        """(checkpoint key, setting, part) of the stateful parts a setting turns on."""
        parts = (
            ("prompt_skip", "generation.skip", self.skipper),
            ("adaptive_rollouts", "generation.adaptive", self.adaptive),
            (
                "head_gate",
                "algorithm.head_gate",
                self.learner.gate if self.learner.gate.active else None,
            ),
        )
        return [(key, setting, part) for key, setting, part in parts if part is not None]

    def save_checkpoint(self) -> Path:
        return write_checkpoint(
            self.run_dir / CHECKPOINT_DIR,
            save_learner=self._save_learner,
            save_replay=self._save_replay,
            state=self._state(),
        )

    def _save_learner(self, directory: Path) -> None:
        save_learner_files(
            directory, model=self.model, optimizer=self.learner.optimizer, rng=self.generator.rng
        )
        if self.reward_refresh is not None:
            self.reward_refresh.save_weights(directory)

    def _save_replay(self, directory: Path) -> None:
        self.replay.save_state(directory)

    def _load_replay(self, directory: Path, state: dict[str, Any]) -> None:
        self.replay.load_state(directory)

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
        self._load_replay(source / REPLAY_DIR, state)
        self.next_group = int(state["next_group"])
        self.prompts_drawn = int(state["prompts_drawn"])
        self.learner.version = int(state["learner_version"])
        self.generator.policy_version = int(state["generator_version"])
        for key, value in state["reward_counts"].items():
            setattr(self.scorer.counts, key, int(value))
        for key, setting, part in self._optional_parts():
            if key not in state:
                raise ValueError(f"{setting} is on, but the checkpoint has no {key} state")
            part.load_state(state[key])
        if self.reward_refresh is not None:
            if not isinstance(state.get("reward_model"), dict):
                raise ValueError(
                    "task.reward = model, but the checkpoint has no reward model state"
                )
            self.reward_refresh.load(state["reward_model"], source)
        self._restore_loop(state)


def train(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Build a `SyncTrainer` from `config` and run it (`runtime.build_trainer` builds whichever
    trainer a config needs)."""
    return SyncTrainer(config).run(**kwargs)


__all__ = ["SyncTrainer", "train"]
