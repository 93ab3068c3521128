"""Making rollouts: which prompts come next, and how a group of completions becomes a batch.

Shared by every runtime. `prompt_indices` is a pure function of (seed, cursor), so a run's prompt
order survives checkpoints and does not depend on who generates. `RolloutMaker` turns prompt
indices into a scored `RolloutBatch` with advantages computed once, at generation (the papers'
convention), charging seconds and counts to the `ComputeMeter` it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import FINISH_REASONS
from llm_replay.generation import Generator, SamplingParams
from llm_replay.metrics import ComputeMeter
from llm_replay.runtime.adaptive_rollouts import AdaptiveRollouts
from llm_replay.tasks import Problem, SafeScorer, task_tag
from llm_replay.tasks.reward_model import ModelScorer

STOP = FINISH_REASONS.index("stop")


def worker_seed(run_seed: int, index: int, incarnation: int) -> int:
    """The sampling seed of generation worker `index` (threaded or Ray): one formula, distinct
    per worker and per incarnation of its generator (the threaded runtime counts the learner's
    version a worker is built at, Ray the times the actor restarted)."""
    return run_seed * 1009 + 7 * (index + 1) + incarnation


def prompt_indices(seed: int, num_prompts: int, start: int, count: int) -> np.ndarray:
    """Prompts `start .. start+count` of the run: consecutive slices of a seeded permutation per
    epoch of `num_prompts` train problems."""
    out: list[int] = []
    while len(out) < count:
        epoch, offset = divmod(start + len(out), num_prompts)
        perm = np.random.default_rng([seed, epoch]).permutation(num_prompts)
        out.extend(perm[offset : offset + count - len(out)].tolist())
    return np.asarray(out, dtype=np.int64)


class RolloutMaker:
    """Generate `group_size` completions per prompt, score them, compute group advantages."""

    def __init__(
        self,
        *,
        generator: Generator,
        tokenizer: Any,
        problems: Sequence[Problem],
        prompts: Sequence[Sequence[int]],
        scorer: SafeScorer | ModelScorer,
        sampling: SamplingParams,
        group_size: int,
        advantage: str,
        correct_threshold: float,
    ) -> None:
        self.generator = generator
        self.tokenizer = tokenizer
        self.problems = problems
        self.prompts = prompts
        self.scorer = scorer
        self.sampling = sampling
        self.group_size = group_size
        self.advantage = advantage
        self.correct_threshold = correct_threshold

    @property
    def reward_version(self) -> int:
        """The scorer's version (a refreshed reward model is a new one)."""
        return int(self.scorer.version)

    def make(
        self,
        indices: np.ndarray,
        first_group: int,
        meter: ComputeMeter,
        adaptive: AdaptiveRollouts | None = None,
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """Rollouts for the prompts at `indices`; group ids are `first_group + position`, rows
        prompt-major. With `adaptive` (AR3PO) a prompt gets between one stage and a full group,
        and an unsolved one may get an earlier correct completion."""
        if adaptive is None:
            everyone = np.arange(len(indices))
            batch, entropies = self.sample(
                indices, everyone, self.group_size, first_group, meter, new_prompts=True
            )
        else:
            batch, entropies = adaptive.sample(self, indices, first_group, meter)
        metrics = {
            "reward/mean": float(batch.rewards.mean()),
            "reward/correct_rate": float(batch.correct.mean()),
            "reward/zero_variance_groups": float(batch.uninformative_groups()[1].mean()),
            "reward/failures": float(self.scorer.counts.failures),
            "generation/mean_length": float(batch.completion_lengths.mean()),
            "generation/stop_rate": float(np.mean(batch.finish_reasons == STOP)),
            "generation/entropy": float(entropies.mean()),
        }
        if adaptive is not None:
            batch = adaptive.reuse(batch, indices, first_group, self)
            metrics.update(adaptive.metrics())
        batch = batch.with_advantages(
            group_advantages(batch.rewards, batch.group_ids, self.advantage)
        )
        return batch, metrics

    def sample(
        self,
        indices: np.ndarray,
        positions: np.ndarray,
        n: int,
        first_group: int,
        meter: ComputeMeter,
        *,
        new_prompts: bool,
    ) -> tuple[RolloutBatch, np.ndarray]:
        """`n` scored completions for each prompt at `positions` of `indices` (group id
        `first_group + position`), without advantages, and the sampled tokens' entropies. The
        meter is charged for what this generates; `new_prompts` counts the prompts too."""
        problems = [self.problems[indices[p]] for p in positions]
        prompts = [self.prompts[indices[p]] for p in positions]
        with meter.time("generation"):
            out = self.generator.generate(prompts, n, self.sampling)
        model_tokens = self.scorer.model_tokens
        with meter.time("scoring"):
            texts = self.tokenizer.batch_decode(out.completions(), skip_special_tokens=True)
            prompt_texts = None
            if isinstance(self.scorer, ModelScorer):
                decoded = self.tokenizer.batch_decode(prompts, skip_special_tokens=True)
                prompt_texts = [decoded[i] for i in out.prompt_index]
            rewards = self.scorer.score(
                texts, [problems[i] for i in out.prompt_index], prompt_texts=prompt_texts
            )
        correct = rewards >= self.correct_threshold
        batch = RolloutBatch.from_flat(
            prompt_ids=np.concatenate([np.asarray(prompts[i], np.int32) for i in out.prompt_index]),
            prompt_lengths=np.asarray([len(prompts[i]) for i in out.prompt_index], np.int32),
            completion_ids=out.completion_ids,
            completion_lengths=out.completion_lengths,
            behaviour_logprobs=out.behaviour_logprobs,
            rewards=rewards,
            group_ids=first_group + np.asarray(positions, np.int64)[out.prompt_index],
            policy_versions=np.full(len(out), out.policy_version, np.int64),
            correct=correct.astype(np.int8),
            finish_reasons=out.finish_reasons,
            reward_versions=np.full(len(out), self.scorer.version, np.int64),
        )
        tags = [task_tag(problems[i]) for i in out.prompt_index]
        if any(tags):  # a mixture's member, on every runtime's rollouts (single tasks have none)
            batch = batch.with_tasks(tags)
        meter.add(
            prompts_generated=len(prompts) if new_prompts else 0,
            rollouts_generated=len(out),
            tokens_generated=int(out.completion_lengths.sum()),
            prompt_tokens=out.prompt_tokens,
            padded_generation_tokens=out.padded_tokens,
            generation_steps=out.steps,
            reward_calls=len(texts),
            reward_model_tokens=self.scorer.model_tokens - model_tokens,
        )
        return batch, out.entropies
