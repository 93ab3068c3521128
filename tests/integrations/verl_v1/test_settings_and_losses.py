"""What verl's config and workers see of llm-replay: checked knobs, start-up checks, the registered
estimator and losses (against llm-replay's own on the same tensors), trajectories saved and read."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

from llm_replay.algorithms.losses import policy_loss
from llm_replay.integrations.verl import ReplaySampler
from llm_replay.integrations.verl.advantages import AdvantageBook, book_advantages
from llm_replay.integrations.verl.plugin import (
    LOSS_PREFIX,
    METRIC_PREFIX,
    NOT_IN_VERL,
    REGISTERED,
    verl_loss,
)
from llm_replay.integrations.verl.sampler import AsyncReplaySampler


def build(kwargs: Any, mode: str = "sync") -> ReplaySampler:
    node = kwargs if not isinstance(kwargs, dict) else OmegaConf.create(kwargs)
    return ReplaySampler(mode, OmegaConf.create({}), None, "drop", node)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "positive", "delta": 2}, r"sampler_kwargs\.delta = 2"),
        ({"method": "positive", "capacty": 8}, r"sampler_kwargs\.capacty"),
        ({"method": "nope"}, r"sampler_kwargs\.method = 'nope'"),
        ({"capacity": 8}, r"sampler_kwargs\.method: name a replay method"),
        ({"method": "positive", "correct_threshold": "high"}, r"sampler_kwargs\.correct_threshold"),
        ({"method": "positive", "advantage": "gae"}, r"sampler_kwargs\.advantage = 'gae'"),
        ({"method": "positive", "group_size": 0}, r"sampler_kwargs\.group_size = 0"),
        ({"method": "positive", "sampling_weights": "yes"}, r"sampler_kwargs\.sampling_weights"),
        ({"method": "uniform", "init_from": "/tmp"}, r"sampler_kwargs\.init_from"),
        (
            {"method": "uniform", "zero_variance": {"enabled": True}},
            r"sampler_kwargs\.zero_variance\.enabled",
        ),
        (
            {"method": "uniform", "anneal": {"enabled": True, "on_policy_batch_size": 64}},
            r"sampler_kwargs\.anneal\.on_policy_batch_size = 64: verl's trainer sizes",
        ),
        (
            {"method": "uniform", "stale_rewards": {"enabled": True, "policy": "rescore"}},
            r"sampler_kwargs\.stale_rewards\.policy = 'rescore': verl's trainer has no reward",
        ),
    ],
)
def test_bad_sampler_kwargs_name_the_knob(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(kwargs)


def test_the_configured_name_builds_the_class_each_mode_needs_and_an_unknown_mode_is_named() -> (
    None
):
    assert type(build({"method": "positive"}, mode="sync")) is ReplaySampler
    for mode in ("colocate_async", "separate_async"):
        sampler = build({"method": "positive"}, mode=mode)
        assert isinstance(sampler, AsyncReplaySampler)
        assert isinstance(sampler, ReplayBufferAsync)  # verl's waits, staleness and refills
    with pytest.raises(ValueError, match="trainer_mode = 'fully_async'"):
        build({"method": "positive"}, mode="fully_async")
    with pytest.raises(ValueError, match="name ReplaySampler"):
        AsyncReplaySampler("sync", {}, None, "drop", OmegaConf.create({"method": "positive"}))


def verl_config(**overrides: Any) -> Any:
    config = OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": "llm_replay",
                "rollout_correction": {"bypass_mode": True, "rollout_is": None},
            },
            "actor_rollout_ref": {
                "rollout": {"n": 4, "calculate_log_probs": True},
                "actor": {"ppo_mini_batch_size": 2},
            },
            "trainer": {"default_local_dir": "/tmp/ckpt", "total_training_steps": 10, "v1": {}},
        }
    )
    config.trainer.v1.sampler = {"sampler_kwargs": {"method": "positive"}}
    for key, value in overrides.items():
        OmegaConf.update(config, key, value)
    return config


def test_the_sampler_reads_verls_config_it_belongs_to() -> None:
    config = verl_config()
    sampler = build(config.trainer.v1.sampler.sampler_kwargs)
    assert sampler.group_size == 4
    assert sampler.mini_batch_prompts == 2
    assert sampler.total_steps == 10
    assert str(sampler.checkpoint_dir) == "/tmp/ckpt"


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("algorithm.adv_estimator", "grpo", "algorithm.adv_estimator = 'grpo'"),
        ("actor_rollout_ref.rollout.calculate_log_probs", False, "calculate_log_probs = False"),
        ("algorithm.rollout_correction.bypass_mode", False, "algorithm.rollout_correction"),
    ],
)
def test_verl_settings_a_replayed_batch_needs_are_checked_at_start(
    setting: str, value: Any, named: str
) -> None:
    config = verl_config(**{setting: value})
    with pytest.raises(ValueError, match=named):
        build(config.trainer.v1.sampler.sampler_kwargs)


def test_asymre_in_verl_needs_the_samplers_dr_grpo_advantages() -> None:
    config = verl_config(**{"actor_rollout_ref.actor.policy_loss.loss_mode": "llm_replay_asymre"})
    with pytest.raises(ValueError, match=r"sampler_kwargs\.advantage = 'grpo'.*'dr_grpo'"):
        build(config.trainer.v1.sampler.sampler_kwargs)
    config.trainer.v1.sampler.sampler_kwargs.advantage = "dr_grpo"
    build(config.trainer.v1.sampler.sampler_kwargs)


def test_the_schedule_recipe_brings_its_advantage_and_checks_its_loss_and_run_length() -> None:
    config = verl_config()
    kwargs = config.trainer.v1.sampler.sampler_kwargs
    kwargs.method = "positive_schedule"
    with pytest.raises(
        ValueError,
        match=r"loss_mode = None: sampler_kwargs\.method 'positive_schedule'.*asymre",
    ):
        build(kwargs)
    config.actor_rollout_ref.actor.policy_loss = {"loss_mode": "llm_replay_asymre"}
    sampler = build(kwargs)  # the recipe's dr_grpo advantage pairs with AsymRE unasked
    assert sampler.settings.advantage == "dr_grpo"
    assert sampler.settings.recipe == "positive_schedule"
    assert sampler.settings.replay.method == "positive" and sampler.settings.follows_progress()
    # verl derives the run's length from the data after it builds the sampler: read at step 1
    config.trainer.total_training_steps = None
    sampler = build(kwargs)
    with pytest.raises(ValueError, match=r"sampler_kwargs\.total_steps: the anneal schedule"):
        sampler._start(1, 2)
    config.actor_rollout_ref.actor.optim = {"total_training_steps": 30}
    sampler = build(kwargs)
    sampler._start(1, 2)
    assert sampler.total_steps == 30
    kwargs.total_steps = 20
    assert build(kwargs).total_steps == 20


def test_auto_is_refused_by_name_for_the_parts_verl_does_not_run() -> None:
    """`auto` carries adaptive rollouts, KL-Cov on reused tokens and two gradient steps a round;
    verl's rollout, mini-batch and loss are its own, so running `auto` there would be another
    method under the same name."""
    config = verl_config()
    config.actor_rollout_ref.actor.policy_loss = {"loss_mode": "llm_replay_asymre"}
    kwargs = config.trainer.v1.sampler.sampler_kwargs
    kwargs.method = "auto"
    with pytest.raises(ValueError, match=r"^sampler_kwargs\.method = 'auto'") as refused:
        build(kwargs)
    message = str(refused.value)
    assert "generation.adaptive" in message and "algorithm.token_control (kl_cov)" in message
    assert "train.steps_per_round" in message
    assert "method=positive_schedule is its replay and loss alone" in message


def test_importance_weights_satisfy_the_correction_check() -> None:
    config = verl_config(
        **{
            "algorithm.rollout_correction.bypass_mode": False,
            "algorithm.rollout_correction.rollout_is": "token",
        }
    )
    build(config.trainer.v1.sampler.sampler_kwargs)


def test_on_policy_needs_no_correction() -> None:
    config = verl_config(**{"algorithm.rollout_correction.bypass_mode": False})
    config.trainer.v1.sampler.sampler_kwargs.method = "on_policy"
    build(config.trainer.v1.sampler.sampler_kwargs)


def test_the_estimator_returns_each_rows_booked_advantage_on_its_tokens() -> None:
    book = AdvantageBook()
    book.write(["a", "b"], [0.5, -2.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    advantages, returns = book_advantages(torch.zeros(2, 3), mask, ["b", "a"], book=book)
    expected = torch.tensor([[-2.0, -2.0, 0.0], [0.5, 0.0, 0.0]])
    assert torch.equal(advantages, expected)
    assert torch.equal(returns, expected)
    book.forget(["a"])
    with pytest.raises(KeyError, match="uid 'a'"):
        book_advantages(torch.zeros(1, 3), mask[:1], ["a"], book=book)


def test_verls_padding_rows_get_a_zero_advantage_and_real_unbooked_rows_still_fail() -> None:
    book = AdvantageBook()
    book.write(["a"], [1.5])
    mask = torch.tensor([[1, 1], [0, 0], [0, 0]])  # verl's pad rows have an empty response mask
    pad = "pad" + "0" * 32
    advantages, _ = book_advantages(torch.zeros(3, 2), mask, ["a", pad, pad], book=book)
    assert torch.equal(advantages, torch.tensor([[1.5, 1.5], [0.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(KeyError, match=f"uid '{pad}'"):  # a pad uid on a real row is an error
        book_advantages(torch.zeros(1, 2), mask[:1], [pad], book=book)


@pytest.mark.parametrize("mode", REGISTERED)
def test_each_registered_loss_is_llm_replays_own_on_the_same_tensors(mode: str) -> None:
    name = mode.removeprefix(LOSS_PREFIX)
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=generator) - 0.1
    new = (old + 0.3 * torch.randn(3, 5, generator=generator)).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    rows = torch.tensor([1.0, -0.5, 0.25])
    verl_value, verl_metrics = verl_loss(name)(old, new, rows[:, None] * mask, mask, "token-mean")
    ours, our_metrics = policy_loss(name, new, old, rows, mask, aggregation="token_mean")
    torch.testing.assert_close(verl_value, ours)
    # the behaviour statistics a method reads, under verl's actor prefix (the sampler maps them)
    assert {k.removeprefix(METRIC_PREFIX): v for k, v in verl_metrics.items()} == {
        k.removeprefix("loss/"): v for k, v in our_metrics.items()
    }
    assert {"actor/llm_replay_kl_behaviour", "actor/llm_replay_log_ratio_m2"} <= set(verl_metrics)
    (verl_grad,) = torch.autograd.grad(verl_value, new)
    (our_grad,) = torch.autograd.grad(ours, new)
    torch.testing.assert_close(verl_grad, our_grad)


def test_losses_verl_cannot_run_are_left_out_and_said_why() -> None:
    assert all(f"{LOSS_PREFIX}{name}" not in REGISTERED for name in NOT_IN_VERL)
    assert f"{LOSS_PREFIX}asymre" in REGISTERED
    assert f"{LOSS_PREFIX}decoupled_ppo" not in REGISTERED  # needs a proximal policy


def test_verl_loads_the_plugin_through_its_entry_point_in_a_fresh_process() -> None:
    """A Ray worker is a fresh Python that imports verl; the entry point alone registers ours."""
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY\n"
        "print('llm_replay' in ADV_ESTIMATOR_REGISTRY, 'llm_replay_asymre' in POLICY_LOSS_REGISTRY)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "True True"


@pytest.mark.usefixtures("transfer_queue")
def test_verl_loads_the_plugin_in_a_ray_worker() -> None:
    import ray

    @ray.remote(num_cpus=0)
    def registered() -> tuple[bool, bool]:
        import verl  # noqa: F401
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY

        return "llm_replay" in ADV_ESTIMATOR_REGISTRY, "llm_replay_tis" in POLICY_LOSS_REGISTRY

    assert ray.get(registered.remote(), timeout=120) == (True, True)
