"""`reward_model:` — a learned reward model as the training reward (`task.reward: model`).

The model is a local sequence classifier with one output (`AutoModelForSequenceClassification`),
scoring the prompt text followed by the completion text. Its output passes through `output`
(`sigmoid`: a probability, as a classifier trained on right/wrong labels gives; `logit`: the raw
score, as a Bradley–Terry preference model gives) and a rollout counts as a success for the
replay methods when that reward reaches `success_threshold`. The task's verifier, where it has
one, stays the evaluation metric. `refresh_every: K` retrains the model every K iterations on the
run's recent rollouts labelled by the verifier (`runtime.reward_refresh`), as iterative RLHF does,
or, with `refresh_from: [DIR, ...]`, loads the next of those reward-model checkpoints (trained
elsewhere) instead; either way stored rewards go stale (see the `stale_rewards` option).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from llm_replay.config.parse import ConfigError, check_positive, did_you_mean, setting

OUTPUTS = ("sigmoid", "logit")


@dataclass
class RewardModelConfig:
    path: str | None = setting(None, "the reward model: a local one-output sequence classifier")
    output: str = setting("sigmoid", "sigmoid (a probability) or logit (a raw score)")
    success_threshold: float = setting(0.5, "a reward at least this counts as a success")
    device: str | None = setting(None, "where it runs; None: the policy's device (model.device)")
    batch_size: int = setting(64, "rows scored per forward")
    max_length: int = setting(256, "tokens of prompt + completion scored, at most")
    timeout_s: float = setting(60.0, "seconds one batch's forward may take")
    refresh_every: int = setting(0, "iterations between retrainings; 0: never")
    refresh_rollouts: int = setting(2048, "the most recent fresh rollouts a retraining learns from")
    refresh_steps: int = setting(40, "gradient steps per retraining")
    refresh_batch: int = setting(64, "rows per retraining step")
    refresh_lr: float = setting(3e-4, "the retraining's learning rate")
    refresh_from: list[str] = setting(
        help="reward-model checkpoints loaded in turn instead of retraining", factory=list
    )

    def check(self) -> None:
        if self.device is not None and not (
            self.device == "cpu" or self.device == "cuda" or self.device.startswith("cuda:")
        ):
            raise ConfigError(f"device = {self.device!r}: use 'cpu', 'cuda' or 'cuda:N'")
        if self.output not in OUTPUTS:
            hint = did_you_mean(self.output, OUTPUTS)
            raise ConfigError(f"output = {self.output!r}: choose one of {OUTPUTS}{hint}")
        if not math.isfinite(self.success_threshold):
            raise ConfigError(f"success_threshold = {self.success_threshold!r}: must be finite")
        for key in ("batch_size", "max_length", "refresh_rollouts", "refresh_steps"):
            check_positive(key, getattr(self, key))
        check_positive("refresh_batch", self.refresh_batch)
        check_positive("timeout_s", self.timeout_s)
        check_positive("refresh_lr", self.refresh_lr)
        check_positive("refresh_every", self.refresh_every, zero_ok=True)
        if self.path is not None:
            check_reward_model_dir(self.path)
        for index, path in enumerate(self.refresh_from):
            check_reward_model_dir(path, f"refresh_from[{index}]")
        if self.refresh_from and not self.refresh_every:
            raise ConfigError("refresh_from: set, but refresh_every = 0 never refreshes")


def check_reward_model_dir(path: str, field: str = "path") -> None:
    """A one-line error naming `field` unless `path` holds a one-output sequence classifier."""
    from llm_replay.models.loading import ModelLoadError, resolve_model_path

    try:
        directory = resolve_model_path(path, field)
    except ModelLoadError as error:
        raise ConfigError(str(error)) from None
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{field} = {path!r}: unreadable config.json ({error})") from None
    architectures = config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise ConfigError(
            f"{field} = {path!r}: not a sequence classifier (architectures {architectures}); a "
            "reward model is saved from an AutoModelForSequenceClassification"
        )
    labels = config.get("num_labels") or len(config.get("id2label") or {}) or 2
    if labels != 1:
        raise ConfigError(
            f"{field} = {path!r}: the classifier has {labels} labels; a reward model has one output "
            "(num_labels=1)"
        )


def check_reward_model_use(
    reward: str, settings: RewardModelConfig, *, stale_rewards: bool = False
) -> None:
    """`task.reward = model` and `reward_model.path` go together; the `stale_rewards` option
    needs them. Which runtimes carry a reward model is theirs to say (`config.runtimes`)."""
    learned = reward == "model"
    if stale_rewards and not learned:
        raise ConfigError(
            f"replay.stale_rewards.enabled = true: task.reward = {reward!r} is a verifier's, which "
            "never goes stale; the option is for task.reward=model"
        )
    if learned and settings.path is None:
        raise ConfigError("reward_model.path = None: task.reward = 'model' needs a reward model")
    if not learned and settings.path is not None:
        raise ConfigError(
            f"reward_model.path = {settings.path!r}: set, but task.reward = {reward!r}; use "
            "task.reward=model to train on it"
        )
