"""A reward model in `reward_funcs`, as TRL takes one, under replay: its version is stored with
each rollout, and `stale_rewards` acts when the trainer is told the model changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tests.integrations.test_trl import DATASET, settings
from transformers import TrainerCallback

from llm_replay.integrations.trl import ReplayGRPOConfig, ReplayGRPOTrainer
from llm_replay.models import load_policy, tiny_reward_model


def test_a_reward_model_in_reward_funcs_replays_with_its_version(tmp_path: Path) -> None:
    reward_model, reward_tokenizer = tiny_reward_model(seed=0)
    knobs = {
        "capacity": 64,
        "replay_ratio": 2,
        "zero_variance": {"enabled": False},
        "stale_rewards": {"enabled": True, "policy": "evict"},
    }
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=4), replay_method="uniform", replay_knobs=knobs
    )
    model, tokenizer = load_policy("builtin:tiny-chain-sum", device="cpu", dtype="float32")
    trainer = ReplayGRPOTrainer(
        model=model,
        reward_funcs=[reward_model],
        reward_processing_classes=[reward_tokenizer],
        args=config,
        train_dataset=DATASET,
        processing_class=tokenizer,
    )
    seen: list[set[int]] = []

    class Retrain(TrainerCallback):  # type: ignore[misc]
        """Stands for a reward model retrained on new preferences after step 2."""

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            table = trainer.pipeline.method.table
            live = table.storage.live_slots()
            seen.append(set(table.storage.reward_version[live].tolist()))
            if state.global_step == 2:
                with torch.no_grad():
                    reward_model.score.weight.normal_()
                trainer.set_reward_version(1)

    trainer.add_callback(Retrain())
    trainer.train()
    assert seen[0] == {0} and seen[-1] == {1}  # the older model's rows were evicted
    assert any(h.get("replay/stale_rewards/evicted", 0) > 0 for h in trainer.state.log_history)
    with pytest.raises(ValueError, match="never goes back"):
        trainer.set_reward_version(0)


def test_rescoring_is_refused_by_name_without_a_reward_model_of_its_own(tmp_path: Path) -> None:
    """Refused with the settings, before a model is loaded (it used to be the trainer's)."""
    knobs = {"capacity": 64, "stale_rewards": {"enabled": True, "policy": "rescore"}}
    with pytest.raises(ValueError, match=r"replay_knobs\.stale_rewards\.policy = 'rescore'"):
        ReplayGRPOConfig(**settings(tmp_path), replay_method="uniform", replay_knobs=knobs)
    knobs["stale_rewards"]["policy"] = "discount"
    ReplayGRPOConfig(**settings(tmp_path), replay_method="uniform", replay_knobs=knobs)


def test_a_step_the_anneal_resizes_is_refused_by_name(tmp_path: Path) -> None:
    """TRL's step is its per-device batch: the anneal cannot resize it."""
    knobs = {"anneal": {"enabled": True, "mode": "schedule", "on_policy_batch_size": 8}}
    with pytest.raises(ValueError, match=r"replay_knobs\.anneal\.on_policy_batch_size = 8"):
        ReplayGRPOConfig(**settings(tmp_path), replay_method="uniform", replay_knobs=knobs)
