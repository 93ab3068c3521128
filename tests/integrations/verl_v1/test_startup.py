"""The start-up checks (`startup.py`) on verl's own composed config: the example run starts on one
GPU without flash_attn, and each setting verl would fail on after its workers start, or would
silently not honour under llm-replay's sampler and estimator, is refused by name, with its fix,
when verl builds the sampler."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from tests.integrations.verl_v1.test_verl_config import (
    EXAMPLE,
    build_as_verl_does,
    compose_verl,
    overrides,
)

from llm_replay.integrations.verl import startup
from llm_replay.integrations.verl.startup import startup_problems

ROLLOUT = "actor_rollout_ref.rollout"
SDPA = "actor_rollout_ref.model.override_config.attn_implementation"
OAPL = [  # the example with OAPL's loss on uniform replay
    "trainer.v1.sampler.sampler_kwargs.method=uniform",
    "++trainer.v1.sampler.sampler_kwargs.advantage=optimal",
    "actor_rollout_ref.actor.policy_loss.loss_mode=llm_replay_oapl",
]
OAPL_SET_UP = [*OAPL, "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]


@pytest.fixture(autouse=True)
def no_flash_attn(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on this machine, and on any without the flash_attn package."""
    monkeypatch.setattr(startup, "flash_attn_installed", lambda: False)


def example(tmp_path: Path, *extra: str) -> Any:
    """examples/verl/run_replay.sh's config: the tiny run, then the llm-replay diff, then extra."""
    run = overrides(EXAMPLE / "tiny_run_overrides.txt", OUT=str(tmp_path), STEPS="4")
    return compose_verl(*run, *overrides(), *extra)


def refusal(config: Any, named: str) -> str:
    """The message verl's sampler build fails with, which names `named`."""
    with pytest.raises(ValueError, match=re.escape(named)) as error:
        build_as_verl_does(config)
    return str(error.value)


def test_the_example_run_starts_on_one_gpu_without_flash_attn(tmp_path: Path) -> None:
    config = example(tmp_path)
    gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    rollout = config.actor_rollout_ref.rollout
    replica = (
        rollout.tensor_model_parallel_size
        * rollout.data_parallel_size
        * rollout.pipeline_model_parallel_size
    )
    assert gpus == 1 and gpus % replica == 0  # ActorRolloutRefWorker.init_model's assert
    model = config.actor_rollout_ref.model
    assert model.override_config.attn_implementation == "sdpa"  # not verl's flash_attention_2
    assert model.use_remove_padding is False
    sampler = build_as_verl_does(config)
    settings = sampler.settings
    assert sampler.replays
    assert startup_problems(config, True, settings.advantage, settings.recipe) == []


@pytest.mark.parametrize(
    ("extra", "named", "fix"),
    [
        (
            [f"{ROLLOUT}.tensor_model_parallel_size=2"],  # verl's default
            f"{ROLLOUT}.tensor_model_parallel_size = 2",
            "the 1 GPU(s) the rollout shares with the actor (trainer.n_gpus_per_node × "
            "trainer.nnodes)",
        ),
        (
            [f"~{SDPA}"],  # verl's default attention
            f"{SDPA} = 'flash_attention_2'",
            f"++{SDPA}=sdpa and actor_rollout_ref.model.use_remove_padding=false",
        ),
        (
            [f"{SDPA}=flash_attention_2"],
            f"{SDPA} = 'flash_attention_2'",
            "install flash-attn",
        ),
        (
            ["critic.enable=true"],  # the critic's model config is its own
            "critic.model.override_config.attn_implementation = 'flash_attention_2'",
            "critic.model.use_remove_padding=false",
        ),
        (
            ["algorithm.use_kl_in_reward=true"],
            "algorithm.use_kl_in_reward = True",
            "actor_rollout_ref.actor.use_kl_loss=true",
        ),
        (
            ["algorithm.filter_groups.enable=true"],
            "algorithm.filter_groups.enable = True",
            "++trainer.v1.sampler.sampler_kwargs.zero_variance.enabled=true",
        ),
        (
            ["trainer.v1.sampler.sync_refill_failed_groups=true"],
            "trainer.v1.sampler.sync_refill_failed_groups = True",
            "set it to false",
        ),
        (
            [
                "algorithm.norm_adv_by_std_in_grpo=false",
                "trainer.v1.sampler.sampler_kwargs.method=positive",  # grpo advantages
                "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
            ],
            "algorithm.norm_adv_by_std_in_grpo = False",
            "++trainer.v1.sampler.sampler_kwargs.advantage=dr_grpo",
        ),
        (
            ["actor_rollout_ref.actor.ppo_epochs=2"],
            "actor_rollout_ref.actor.ppo_epochs = 2",
            "multiplying the method's replay ratio",
        ),
        (
            [*OAPL, "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
            "actor_rollout_ref.actor.loss_agg_mode = 'token-mean'",
            "set it to 'seq-mean-token-mean'",
        ),
        (
            [
                *OAPL_SET_UP,
                "algorithm.rollout_correction.bypass_mode=false",
                "algorithm.rollout_correction.rollout_is=token",
            ],
            "algorithm.rollout_correction.bypass_mode",
            "an importance weight would also multiply a squared loss",
        ),
        (
            [*OAPL_SET_UP, f"{ROLLOUT}.top_p=0.9"],
            f"{ROLLOUT}.top_k/top_p",
            "sample with top_k = -1 and top_p = 1",
        ),
        (
            [*OAPL_SET_UP, "++trainer.v1.sampler.sampler_kwargs.sampling_weights=true"],
            "sampler_kwargs.sampling_weights = True",
            "move the target instead of weighting the row",
        ),
    ],
)
def test_a_setting_verl_would_fail_on_or_not_honour_is_refused_by_name(
    tmp_path: Path, extra: list[str], named: str, fix: str
) -> None:
    assert fix in refusal(example(tmp_path, *extra), named)


@pytest.mark.parametrize(
    "extra",
    [
        ["algorithm.norm_adv_by_std_in_grpo=false"],  # the example's dr_grpo ignores it anyway
        [  # verl's default with grpo advantages
            "trainer.v1.sampler.sampler_kwargs.method=positive",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
        ],
        ["actor_rollout_ref.actor.use_kl_loss=true"],  # the KL the refusal points to
        ["critic.enable=true", f"++{SDPA.replace('actor_rollout_ref', 'critic')}=sdpa"],
        ["actor_rollout_ref.actor.strategy=megatron", f"~{SDPA}"],  # builds no HF model
        [  # the fixes the refusals name
            "trainer.v1.sampler.sampler_kwargs.method=on_policy",
            "~trainer.v1.sampler.sampler_kwargs.capacity",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
            "++trainer.v1.sampler.sampler_kwargs.zero_variance.enabled=true",
        ],
        [
            "trainer.v1.sampler.sampler_kwargs.method=positive",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
            "algorithm.norm_adv_by_std_in_grpo=false",
            "++trainer.v1.sampler.sampler_kwargs.advantage=dr_grpo",
        ],
        OAPL_SET_UP,  # the example's bypass mode and untruncated sampling
    ],
)
def test_what_the_checks_leave_alone_builds(tmp_path: Path, extra: list[str]) -> None:
    build_as_verl_does(example(tmp_path, *extra))


def test_with_flash_attn_installed_verls_default_attention_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(startup, "flash_attn_installed", lambda: True)
    build_as_verl_does(
        example(tmp_path, f"~{SDPA}", "actor_rollout_ref.model.use_remove_padding=true")
    )


SEPARATE = (
    "trainer.v1.trainer_mode=separate_async",
    f"{ROLLOUT}.tensor_model_parallel_size=2",
    f"{ROLLOUT}.nnodes=1",
)


def test_separate_async_without_hybrid_replicas_counts_only_the_standalone_rollouts_gpus(
    tmp_path: Path,
) -> None:
    """With actor_rollout_ref.hybrid_engine=false the trainer's one GPU holds no rollout."""
    standalone = (*SEPARATE, "actor_rollout_ref.hybrid_engine=false")
    build_as_verl_does(example(tmp_path, *standalone, f"{ROLLOUT}.n_gpus_per_node=2"))
    config = example(tmp_path, *standalone, f"{ROLLOUT}.n_gpus_per_node=3")
    message = refusal(config, f"{ROLLOUT}.tensor_model_parallel_size = 2")
    assert "the 3 GPU(s) of the standalone rollout" in message
    assert "start 1 replica(s) and leave the rest idle" in message
    assert "trainer.n_gpus_per_node" not in message


def test_separate_async_with_hybrid_replicas_also_needs_the_trainers_gpus_to_divide(
    tmp_path: Path,
) -> None:
    config = example(tmp_path, *SEPARATE, f"{ROLLOUT}.n_gpus_per_node=2")
    message = refusal(config, f"{ROLLOUT}.tensor_model_parallel_size = 2")
    assert "the 1 GPU(s) the rollout shares with the actor" in message
    assert "standalone" not in message


def test_a_config_without_the_keys_a_check_reads_skips_that_check() -> None:
    """An older verl config (or a test's partial one) lacks the layout, model and new keys."""
    root = OmegaConf.create(
        {"algorithm": {"adv_estimator": "llm_replay", "rollout_correction": {"bypass_mode": True}}}
    )
    assert startup_problems(root, replays=True) == []
    assert startup_problems(None, replays=True) == []
