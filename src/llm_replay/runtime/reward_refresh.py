"""A learned reward model in the sync loop: watched against the verifier, retrained on schedule.

With `task.reward = model` the policy trains on a reward model's scores while the task's verifier,
which the run still has, watches: every fresh rollout is also verified (monitoring, not charged to
the training compute, like evaluation), which gives the run's reward-hacking gap
(`reward/verifier_correct_rate` against `reward/correct_rate`, and `reward_model/agreement`, the
share of rollouts where the reward model's success and the verifier's agree).

`reward_model.refresh_every: K` retrains the reward model every K iterations on the most recent
`refresh_rollouts` fresh rollouts with their verifier labels, as iterative RLHF retrains its
reward model on samples from the current policy. The window is kept here rather than read from
the method's table because the table holds what the method keeps (a positive-biased table is
mostly successes), which would teach the reward model a skewed picture. A retraining bumps the
model's version; rollouts stored before it keep their old rewards and version, which is what the
`stale_rewards` option acts on. Retraining is charged to the compute meter (`scoring` seconds,
`reward_model_train_tokens`). The window and the retrained weights are part of a checkpoint.
With `refresh_from`, a refresh loads the next listed checkpoint instead (a reward model retrained
elsewhere, on human preferences say); loading is not charged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.config.reward_model import RewardModelConfig
from llm_replay.data.batch import RolloutBatch
from llm_replay.metrics import ComputeMeter
from llm_replay.tasks import Problem, SafeScorer
from llm_replay.tasks.reward_model import ModelScorer, RewardModel, decode_rows

WEIGHTS_DIR = "reward_model"


class RewardModelRefresh:
    """The sync loop's reward-model bookkeeping (module docstring): `observe` each fresh round,
    `refresh` when `due`."""

    def __init__(
        self,
        settings: RewardModelConfig,
        scorer: ModelScorer,
        verifier: SafeScorer,
        tokenizer: Any,
        *,
        seed: int,
    ) -> None:
        self.settings, self.scorer, self.verifier = settings, scorer, verifier
        self.tokenizer, self.seed = tokenizer, seed
        self.window: deque[tuple[str, str, int]] = deque(maxlen=settings.refresh_rollouts)
        self.refreshes = 0

    @property
    def model(self) -> RewardModel:
        return self.scorer.model

    def observe(self, batch: RolloutBatch, problems: Sequence[Problem]) -> dict[str, float]:
        """Verify the fresh rollouts (`problems[i]` is row i's), remember them for retraining,
        and report how the reward model's judgement compares with the verifier's."""
        prompts, completions = decode_rows(self.tokenizer, batch)
        verified = self.verifier.score(completions, problems)
        labels = (verified >= self.verifier.task.correct_threshold).astype(np.int64)
        self.window.extend(zip(prompts, completions, labels.tolist(), strict=True))
        success = batch.rewards >= self.settings.success_threshold
        return {
            "reward/verifier_correct_rate": float(labels.mean()),
            "reward_model/agreement": float((success == labels.astype(bool)).mean()),
            "reward_model/version": float(self.model.version),
        }

    def due(self, iteration: int) -> bool:
        every, listed = self.settings.refresh_every, self.settings.refresh_from
        if not every or iteration <= 0 or iteration % every:
            return False
        return self.refreshes < len(listed) if listed else len(self.window) > 0

    def refresh(self, meter: ComputeMeter) -> dict[str, float]:
        """Retrain on the window now (or load the next `refresh_from` checkpoint); the model's
        version goes up by one."""
        s = self.settings
        if s.refresh_from:
            from llm_replay.models.loading import resolve_model_path

            field = f"reward_model.refresh_from[{self.refreshes}]"
            path = resolve_model_path(s.refresh_from[self.refreshes], field)
            self.model.load_weights(path, self.model.version + 1)
            self.refreshes += 1
            return {"reward_model/refreshes": float(self.refreshes)}
        prompts, completions, labels = zip(*self.window, strict=True)
        trained = self.model.tokens_trained
        with meter.time("scoring"):
            stats = self.model.retrain(
                prompts,
                completions,
                labels,
                steps=s.refresh_steps,
                batch_size=s.refresh_batch,
                lr=s.refresh_lr,
                seed=self.seed * 1_000_003 + self.refreshes,
            )
        meter.add(reward_model_train_tokens=self.model.tokens_trained - trained)
        self.refreshes += 1
        out = {f"reward_model/refresh_{k}": v for k, v in stats.items()}
        out["reward_model/refreshes"] = float(self.refreshes)
        out["reward_model/refresh_rollouts"] = float(len(labels))
        return out

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        return {
            "version": self.model.version,
            "refreshes": self.refreshes,
            "window": [list(item) for item in self.window],
        }

    def save_weights(self, directory: Path) -> None:
        if self.model.version > 0:
            self.model.save(directory / WEIGHTS_DIR)

    def load(self, state: dict[str, Any], directory: Path) -> None:
        version = int(state["version"])
        if version > 0:
            self.model.load_weights(directory / WEIGHTS_DIR, version)
        self.refreshes = int(state["refreshes"])
        self.window.clear()
        self.window.extend((str(p), str(c), int(label)) for p, c, label in state["window"])


class RunRewardModel:
    """The run's reward model lent to methods (`methods.base.StoredRewards`): re-scores stored
    rollouts, charging the forwards to the run's meter; raises if any of them fails."""

    def __init__(
        self, scorer: ModelScorer, tokenizer: Any, meter: ComputeMeter, success_threshold: float
    ) -> None:
        self.scorer, self.tokenizer, self.meter = scorer, tokenizer, meter
        self._threshold = float(success_threshold)

    @property
    def version(self) -> int:
        return self.scorer.version

    @property
    def success_threshold(self) -> float:
        return self._threshold

    def rescore(self, batch: RolloutBatch) -> np.ndarray:
        calls, tokens = self.scorer.counts.calls, self.scorer.model_tokens
        try:
            with self.meter.time("scoring"):
                return self.scorer.score_rows(self.tokenizer, batch)
        finally:
            self.meter.add(
                reward_calls=self.scorer.counts.calls - calls,
                reward_model_tokens=self.scorer.model_tokens - tokens,
            )
