"""The verl config diff in docs/verl.md (examples/verl/llm_replay_overrides.txt) against verl's own config:
composed with Hydra from verl's `ppo_trainer.yaml`, every override lands on a real setting, and
verl's own loaders build our sampler, callback, estimator and loss from the result."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import verl
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from llm_replay.integrations.verl import ReplayCheckpointCallback, ReplaySampler
from llm_replay.integrations.verl.plugin import estimator

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "verl"
OVERRIDES = EXAMPLE / "llm_replay_overrides.txt"


def overrides(path: Path = OVERRIDES, **fill: str) -> list[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    out = [line for line in lines if line and not line.startswith("#")]
    for name, value in fill.items():
        out = [line.replace(f"${name}", value) for line in out]
    return out


# What a verl run here needs besides the diff, as any machine without flash_attn and with a
# one-GPU rollout pool would (the start-up checks refuse verl's defaults there; the example run
# carries the same lines): PyTorch's attention, and one GPU a rollout replica.
MACHINE = (
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=false",
)


def compose_verl(*lines: str) -> Any:
    """verl's `ppo_trainer.yaml` with exactly these overrides, as `main_ppo` composes it."""
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(lines))


def verl_config(*extra: str) -> Any:
    return compose_verl(*overrides(), *MACHINE, *extra)


def build_as_verl_does(config: Any) -> Any:
    """verl's own `PPOTrainer._build_replay_buffer`, on an object with the three attributes it
    reads (the whole trainer builds workers; `test_fit.py` builds that)."""
    trainer = SimpleNamespace(
        config=config,
        trainer_mode=config.trainer.v1.trainer_mode,
        _add_prompts_to_generate=lambda count: count,
    )
    return PPOTrainer._build_replay_buffer(trainer)


def test_verl_builds_our_sampler_callback_estimator_and_loss_from_the_documented_diff() -> None:
    config = verl_config("actor_rollout_ref.rollout.n=8", "trainer.default_local_dir=/tmp/ck")
    sampler = build_as_verl_does(config)
    assert isinstance(sampler, ReplaySampler)
    assert (
        sampler.settings.recipe == "positive_schedule"
        and sampler.settings.replay.method == "positive"
    )
    assert sampler.settings.advantage == "dr_grpo" and sampler.settings.follows_progress()
    assert sampler.group_size == 8
    assert sampler.mini_batch_prompts == config.actor_rollout_ref.actor.ppo_mini_batch_size
    assert str(sampler.checkpoint_dir) == "/tmp/ck"
    assert isinstance(build_checkpoint_callback(config), ReplayCheckpointCallback)
    assert get_adv_estimator_fn(config.algorithm.adv_estimator) is estimator
    loss = get_policy_loss_fn(config.actor_rollout_ref.actor.policy_loss.loss_mode)
    assert loss.__name__ == "llm_replay_asymre"


def test_a_bad_knob_in_the_diff_fails_when_verl_builds_the_sampler() -> None:
    config = verl_config("+trainer.v1.sampler.sampler_kwargs.delta=3")
    with pytest.raises(ValueError, match=r"sampler_kwargs\.delta = 3"):
        build_as_verl_does(config)


def test_leaving_verls_grpo_estimator_on_is_refused_at_start() -> None:
    config = verl_config("algorithm.adv_estimator=grpo")
    with pytest.raises(ValueError, match=r"algorithm\.adv_estimator = 'grpo'"):
        build_as_verl_does(config)


def test_the_example_runs_settings_are_all_verl_settings(tmp_path: Path) -> None:
    """examples/verl/run_replay.sh's whole command line (not run here: it needs a GPU and vLLM)
    composes against verl's config, and our sampler builds from it."""
    run = overrides(EXAMPLE / "tiny_run_overrides.txt", OUT=str(tmp_path), STEPS="4")
    config = compose_verl(*run, *overrides())  # run_replay.sh's order
    assert config.trainer.total_training_steps == 4
    assert config.reward.custom_reward_function.path == "examples/verl/reward.py"
    sampler = build_as_verl_does(config)
    assert (sampler.group_size, sampler.mini_batch_prompts) == (8, 16)
    assert sampler.total_steps == 4  # the schedule's run length
    assert sampler.checkpoint_dir == tmp_path / "checkpoints"


def test_the_example_reward_is_exact_match_on_the_first_word() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("example_reward", EXAMPLE / "reward.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("s", " 42\nmore", "42") == 1.0
    assert module.compute_score("s", "421", "42") == 0.0
    assert module.compute_score("s", "", "42") == 0.0
