"""Replayed preference pairs inside TRL's online DPO trainer, end to end on the built-in model:
TRL's own step with nothing replayed, the stored pairs judged again as they were, TRL's loss over
fresh and replayed pairs, the truncated-IS weight on a replayed pair's gradient, checkpoints."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer

from llm_replay.integrations.trl.online_dpo import ReplayOnlineDPOConfig, ReplayOnlineDPOTrainer
from llm_replay.models import load_policy


def digits(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    """A reward that tells completions apart: the digits written."""
    return [float(sum(ch.isdigit() for ch in c)) for c in completions]


def settings(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 4,
        "max_steps": 3,
        "max_new_tokens": 8,
        "max_length": 64,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "seed": 0,
        "dataloader_num_workers": 0,
        "temperature": 1.0,
        "missing_eos_penalty": 1.0,
        **extra,
    }


def build(args: Any, trainer_cls: type = ReplayOnlineDPOTrainer) -> Any:
    model, tokenizer = load_policy("builtin:tiny-chain-sum", device="cpu", dtype="float32")
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i + 1}=" for i in range(32)]})
    return trainer_cls(
        model=model,
        reward_funcs=digits,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def losses(trainer: Any) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


class Watched(ReplayOnlineDPOTrainer):
    """Keeps what each step's loss saw, to recompute it."""

    seen: list[dict[str, Any]]
    judged: torch.Tensor

    def _calculate_rewards_from_functions(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.judged = super()._calculate_rewards_from_functions(*args, **kwargs)
        return self.judged  # the tensor TRL applies its EOS penalty to, in place, then judges by

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not hasattr(self, "seen"):
            self.seen = []
        self.seen.append(
            {
                "loss": float(loss),
                "fresh": self._fresh,
                "replayed": None if self._replayed is None else self._replayed,
                "policy": self._policy,
                "reference": self._reference,
                "mask": self._trained[1].float(),
                "weights": self._weights,
                "judged": self.judged.clone(),
            }
        )
        return loss


def test_with_nothing_replayed_it_is_trls_trainer_step_for_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    plain = build(OnlineDPOConfig(**settings(tmp_path / "a")), OnlineDPOTrainer)
    plain.train()
    torch.manual_seed(0)
    ours = build(ReplayOnlineDPOConfig(**settings(tmp_path / "b")))
    ours.train()
    assert losses(ours) == losses(plain) and len(losses(plain)) == 3


def test_stored_pairs_are_judged_again_as_they_were_and_trained_in_trls_loss(
    tmp_path: Path,
) -> None:
    args = ReplayOnlineDPOConfig(**settings(tmp_path, max_steps=6, replay_pairs=2))
    trainer = build(args, Watched)
    trainer.train()
    replayed = [s for s in trainer.seen if s["replayed"] is not None]
    assert replayed, "no step drew a stored pair"
    for step in trainer.seen:
        n, b = step["fresh"], step["policy"].size(0) // 2
        k = 0 if step["replayed"] is None else len(step["replayed"]) // 2
        assert b == n + k
        lp, ref, mask = step["policy"], step["reference"], step["mask"]
        s, sr = (lp * mask).sum(1), (ref * mask).sum(1)
        if k:  # TRL's judgement picked each stored chosen (rows n..b) over its rejected
            stored = step["replayed"]
            assert np.all(stored.correct[0::2]) and not np.any(stored.correct[1::2])
        # TRL's loss is DPO over fresh and replayed pairs, the stored chosen in the first half
        rewards = step["judged"]
        first = rewards[:b] >= rewards[b:]
        chosen = torch.where(first, torch.arange(b), torch.arange(b) + b)
        rejected = torch.where(first, torch.arange(b) + b, torch.arange(b))
        if k:
            assert torch.all(chosen[n:] == torch.arange(n, b))
        logits = (s[chosen] - s[rejected]) - (sr[chosen] - sr[rejected])
        want = float(-F.logsigmoid(trainer.beta * logits).mean())
        assert step["loss"] == pytest.approx(want, abs=1e-5)
    stats = [h for h in trainer.state.log_history if "replay/pairs_replayed" in h]
    for before, now in itertools.pairwise(stats):  # as many as asked for, of those stored
        assert now["replay/pairs_replayed"] == min(2, before["preference/stored_pairs"])


def test_a_replayed_pairs_gradient_is_weighted_by_its_truncated_ratio(tmp_path: Path) -> None:
    knobs = {"correction": "truncated_is", "is_cap": 1.5}
    args = ReplayOnlineDPOConfig(
        **settings(tmp_path, max_steps=4, replay_pairs=2, replay_knobs=knobs)
    )
    trainer = build(args, Watched)
    trainer.train()
    weighted = [s for s in trainer.seen if s["weights"] is not None]
    assert weighted
    for step in weighted:
        n, b = step["fresh"], step["policy"].size(0) // 2
        stored = step["replayed"]
        behaviour = torch.as_tensor((stored.behaviour_logprobs * stored.loss_mask).sum(1))
        current = (step["policy"] * step["mask"]).sum(1).double()
        log_ratio = torch.cat([current[n:b], current[b + n :]]) - torch.cat(
            [behaviour[0::2], behaviour[1::2]]
        )
        k = b - n
        want = (log_ratio[:k] + log_ratio[k:]).exp().clamp(max=1.5)
        w = step["weights"].double()
        assert torch.allclose(w[n:b], want, atol=1e-4) and torch.all(w[:n] == 1)
        assert torch.all(w[b + n :] == w[n:b])


def test_the_pair_table_resumes_from_trls_checkpoint(tmp_path: Path) -> None:
    extra = {"save_strategy": "steps", "save_steps": 5, "max_steps": 5, "replay_pairs": 2}
    first = build(ReplayOnlineDPOConfig(**settings(tmp_path, **extra)))
    first.train()
    stored = len(first.pairs)
    assert stored > 0
    checkpoint = tmp_path / "out" / "checkpoint-5"
    assert (checkpoint / "llm_replay" / "online_dpo.json").is_file()
    assert not list(checkpoint.rglob("*.pkl"))
    resumed = build(ReplayOnlineDPOConfig(**settings(tmp_path, **{**extra, "max_steps": 6})))
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.prompts_seen == first.prompts_seen + 4
    assert resumed.meter.counts["gradient_steps"] == 6
    assert len(resumed.pairs) >= stored  # the table came back, then grew or kept its size


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"replay_knobs": {"capcity": 8}}, r"^replay_knobs\.capcity: unknown"),
        ({"replay_knobs": {"replay": "often"}, "replay_pairs": 1}, r"replay = 'often'"),
        ({"replay_pairs": -1}, r"^replay_pairs = -1: must be an integer >= 0"),
        ({"replay_pairs": 2, "replay_knobs": {"replay": "none"}}, r"draws no pairs"),
        (
            {"temperature": 0.9, "replay_knobs": {"correction": "truncated_is"}},
            r"^temperature = 0\.9: .*truncated_is",
        ),
    ],
)
def test_bad_settings_are_named_before_a_model_loads(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ReplayOnlineDPOConfig(**settings(tmp_path, **extra))
