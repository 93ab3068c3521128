"""A learned reward model: a local one-output sequence classifier scoring prompt + completion.

RLHF scores rollouts with a model trained on preferences or labels rather than a verifier, and
iterative RLHF retrains that model during the run on the current policy's samples, so a reward
stored in a replay table belongs to a model that may no longer exist. `RewardModel` loads such a
classifier with `from_pretrained(local_files_only=True)`, scores text in batches (right-padded,
so a batch scores exactly as its rows one by one), counts the tokens it forwards (the compute
meter charges them), carries a `version` that a retraining bumps, and retrains in place on
labelled text (`retrain`, binary cross-entropy on its logit). `ModelScorer` puts it behind the
reward seam the run loop uses (`SafeScorer`'s), with a time limit per batch: a batch that fails
or runs out of time gets the failure reward and is counted, as a reward function's call would.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.data.batch import RolloutBatch
from llm_replay.models.loading import (
    ModelLoadError,
    cannot_load,
    load_errors,
    resolve_model_path,
)
from llm_replay.tasks.base import Problem, Task
from llm_replay.tasks.rewards import RewardCounts

log = logging.getLogger(__name__)

FIELD = "reward_model.path"


class RewardModel:
    """A one-output sequence classifier as a reward: `score(prompts, completions)` → rewards."""

    def __init__(
        self,
        path: str,
        *,
        output: str = "sigmoid",
        device: str = "cpu",
        batch_size: int = 64,
        max_length: int = 256,
        version: int = 0,
    ) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if output not in ("sigmoid", "logit"):
            raise ValueError(f"reward_model.output = {output!r}: choose sigmoid or logit")
        directory = resolve_model_path(path, FIELD)
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
            model = AutoModelForSequenceClassification.from_pretrained(
                directory, local_files_only=True, dtype=torch.float32
            )
        except load_errors() as error:
            raise cannot_load(FIELD, path, error) from None
        if model.config.num_labels != 1:
            raise ModelLoadError(
                f"{FIELD} = {path!r}: the classifier has {model.config.num_labels} labels; a "
                "reward model has one output (num_labels=1)"
            )
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token_id is None:
                raise ModelLoadError(f"{FIELD} = {path!r}: the tokenizer has no pad or eos token")
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"
        model.config.pad_token_id = tokenizer.pad_token_id
        self.path, self.output, self.device = path, output, device
        self.batch_size, self.max_length = int(batch_size), int(max_length)
        self.tokenizer, self.model = tokenizer, model.to(device).eval()
        self.version = int(version)
        self.tokens_scored = 0
        self.tokens_trained = 0
        self.parameters = sum(p.numel() for p in self.model.parameters())

    # ------------------------------------------------------------------ scoring
    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """Rewards [N] float64 for each prompt followed by its completion."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        texts = [p + c for p, c in zip(prompts, completions, strict=True)]
        out = np.empty(len(texts), dtype=np.float64)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            out[start : start + len(chunk)] = self._forward(chunk)
        return out

    def _encode(self, texts: Sequence[str]) -> Any:
        enc = self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )
        return {
            k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")
        }

    def _forward(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        enc = self._encode(texts)
        with torch.no_grad():
            logits = self.model(**enc).logits[:, 0].double()
        self.tokens_scored += int(enc["attention_mask"].sum())
        values = torch.sigmoid(logits) if self.output == "sigmoid" else logits
        return values.cpu().numpy()

    # ------------------------------------------------------------------ retraining
    def retrain(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        labels: Sequence[float],
        *,
        steps: int,
        batch_size: int,
        lr: float,
        seed: int,
    ) -> dict[str, float]:
        """Fine-tune on labelled text (1 right, 0 wrong) for `steps` minibatches drawn with
        `seed`, then bump the version. Returns the loss and accuracy before and after."""
        import torch

        if not len(prompts) == len(completions) == len(labels) or not len(labels):
            raise ValueError("retrain: needs as many prompts, completions and labels, at least 1")
        texts = [p + c for p, c in zip(prompts, completions, strict=True)]
        target = torch.as_tensor(np.asarray(labels, dtype=np.float32), device=self.device)
        before = self._fit_stats(texts, target)
        rng = np.random.default_rng(seed)
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)
        self.model.train()
        try:
            for _ in range(steps):
                rows = rng.choice(len(texts), size=min(batch_size, len(texts)), replace=False)
                enc = self._encode([texts[i] for i in rows])
                logits = self.model(**enc).logits[:, 0]
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target[rows])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                self.tokens_trained += int(enc["attention_mask"].sum())
        finally:
            self.model.eval()
        self.version += 1
        after = self._fit_stats(texts, target)
        return {
            "loss_before": before[0],
            "accuracy_before": before[1],
            "loss_after": after[0],
            "accuracy_after": after[1],
        }

    def _fit_stats(self, texts: list[str], target: Any) -> tuple[float, float]:
        import torch

        logits = torch.cat(
            [
                self.model(**self._encode(texts[i : i + self.batch_size])).logits[:, 0].detach()
                for i in range(0, len(texts), self.batch_size)
            ]
        )
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
        accuracy = ((logits > 0).float() == target).float().mean()
        return float(loss), float(accuracy)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: Path) -> None:
        """Weights (safetensors) and tokenizer, loadable as a reward model of its own."""
        self.model.save_pretrained(directory, safe_serialization=True)
        self.tokenizer.save_pretrained(directory)

    def load_weights(self, directory: Path, version: int) -> None:
        """Weights saved by `save` (a checkpoint's retrained model), as version `version`."""
        from safetensors.torch import load_file

        try:
            state = load_file(str(Path(directory) / "model.safetensors"), device=self.device)
            self.model.load_state_dict(state)
        except (OSError, RuntimeError) as error:
            first = str(error).strip().splitlines()[0]
            raise ModelLoadError(
                f"{directory}: not this reward model's weights ({first})"
            ) from None
        self.version = int(version)


class ModelScorer:
    """The reward seam of `SafeScorer` (`score`, `counts`, `close`, `version`) over a reward
    model; each batch of `reward_model.batch_size` texts runs under `timeout_s`."""

    def __init__(
        self, model: RewardModel, task: Task, *, timeout_s: float, failure_reward: float
    ) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"reward_model.timeout_s = {timeout_s!r}: must be > 0")
        self.model, self.task = model, task
        self.timeout_s, self.failure_reward = float(timeout_s), float(failure_reward)
        self.counts = RewardCounts()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="reward-model")

    @property
    def version(self) -> int:
        return self.model.version

    @property
    def model_tokens(self) -> int:
        return self.model.tokens_scored

    def score(
        self,
        completions: Sequence[str],
        problems: Sequence[Problem],
        prompt_texts: Sequence[str] | None = None,
    ) -> np.ndarray:
        """Rewards [N] for completions of `prompt_texts` (the decoded prompts the policy saw;
        each problem's prompt when not given)."""
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
        prompts = [p.prompt for p in problems] if prompt_texts is None else list(prompt_texts)
        rewards = np.empty(len(completions), dtype=np.float64)
        size = self.model.batch_size
        for start in range(0, len(completions), size):
            end = min(start + size, len(completions))
            self.counts.calls += end - start
            future = self._pool.submit(self.model.score, prompts[start:end], completions[start:end])
            try:
                values = future.result(timeout=self.timeout_s)
                if not np.isfinite(values).all():
                    raise ValueError("a reward is not finite")
                rewards[start:end] = values
            except FutureTimeout:
                self.counts.timeouts += end - start
                self._fail(start, end, rewards, f"no result in {self.timeout_s:g}s")
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="reward-model")
            except Exception as error:
                self.counts.errors += end - start
                self._fail(start, end, rewards, f"{type(error).__name__}: {error}")
        return rewards

    def score_rows(self, tokenizer: Any, batch: RolloutBatch) -> np.ndarray:
        """Rewards for stored rows (decoded with the policy's `tokenizer`), all or nothing: raises
        if the model failed on any of them, so a caller re-scoring a table writes nothing."""
        prompts, completions = decode_rows(tokenizer, batch)
        failures = self.counts.failures
        rewards = self.score(completions, [Problem(p, "") for p in prompts], prompt_texts=prompts)
        failed = self.counts.failures - failures
        if failed:
            raise RuntimeError(f"the reward model failed on {failed} of {len(batch)} rollouts")
        return rewards

    def _fail(self, start: int, end: int, rewards: np.ndarray, why: str) -> None:
        rewards[start:end] = self.failure_reward
        log.warning("reward model failed on rollouts %d-%d: %s", start, end - 1, why)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def decode_rows(tokenizer: Any, batch: RolloutBatch) -> tuple[list[str], list[str]]:
    """Each row's prompt and completion as text (special tokens dropped), as generation saw them."""
    p_end = np.cumsum(batch.prompt_lengths)
    c_end = np.cumsum(batch.completion_lengths)
    prompts = [
        batch.prompt_ids[e - n : e].tolist()
        for e, n in zip(p_end, batch.prompt_lengths, strict=True)
    ]
    completions = [
        batch.completion_ids[e - n : e].tolist()
        for e, n in zip(c_end, batch.completion_lengths, strict=True)
    ]
    return (
        list(tokenizer.batch_decode(prompts, skip_special_tokens=True)),
        list(tokenizer.batch_decode(completions, skip_special_tokens=True)),
    )
