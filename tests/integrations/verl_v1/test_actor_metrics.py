"""What a method reads of verl's actor (`observer.py`), through verl's real `_update_actor`.

The stub actor (`workers.py`, `actor_metrics.py`) returns what verl's engine worker returns; the
first test holds it to verl's own code: the loss's keys from verl's `ppo_loss` on a batch built
here, the worker's from its `_postprocess_output`. The rest read the statistics a method sees
after verl's trainer step: a clipped loss's clip fraction (which anneal's `clip_max` reads),
the entropy when verl computes it and its absence when not, and the start-up check for an
option that reads a statistic verl will not report.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from tests.integrations.verl_v1.actor_metrics import actor_config
from tests.integrations.verl_v1.test_real_step import build_trainer, run_steps
from tests.integrations.verl_v1.test_verl_config import verl_config
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import TrainingWorker
from verl.workers.utils.losses import ppo_loss

from llm_replay.integrations.verl.observer import (
    missing_signals,
    reported_signals,
    step_statistics,
)
from llm_replay.integrations.verl.settings import SamplerSettings
from llm_replay.methods.signals import STEP_KEYS

pytestmark = pytest.mark.usefixtures("transfer_queue")

SAMPLER = "trainer.v1.sampler.sampler_kwargs"
DP = 2  # verl's worker needs the mini-batch (ppo_mini_batch_size 2 × n 4) split evenly over ranks


def method(loss: str, *extra: str) -> list[str]:
    return [
        f"{SAMPLER}.method=positive",
        f"~{SAMPLER}.capacity",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss}",
        *extra,
    ]


def verl_loss_keys(config: Any, *, entropy: bool) -> set[str]:
    """The keys verl's `ppo_loss` returns under this actor config, on two rows built here."""
    prompts = [torch.tensor([5, 6]), torch.tensor([7, 8, 9])]
    responses = [torch.tensor([10, 11, 12]), torch.tensor([13, 14])]
    old = [torch.tensor([-1.0, -0.5, -2.0]), torch.tensor([-0.3, -1.2])]

    def nested(tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)

    def sequence(values: list[torch.Tensor]) -> torch.Tensor:  # [P + R] each, shifted by one
        return nested(
            [
                torch.cat([torch.zeros(len(p) - 1), v, torch.zeros(1)])
                for p, v in zip(prompts, values, strict=True)
            ]
        )

    data = tu.get_tensordict(
        tensor_dict={
            "prompts": nested(prompts),
            "responses": nested(responses),
            "response_mask": nested([torch.ones_like(r) for r in responses]),
            "old_log_probs": nested(old),
            "advantages": nested([torch.full((3,), 1.0), torch.full((2,), -1.0)]),
        },
        non_tensor_dict={"dp_size": 1, "batch_num_tokens": 5, "global_batch_size": 2},
    )
    output = {"log_probs": sequence([o + 0.3 for o in old])}
    if entropy:
        output["entropy"] = sequence([torch.full((3,), 0.7), torch.full((2,), 0.4)])
    _, metrics = ppo_loss(config, output, data)
    return set(metrics)


def verl_worker_keys(loss_metrics: set[str], monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The keys verl's worker returns for one mini-batch that steps the scheduler: its
    `_postprocess_output` on that mini-batch's loss metrics, on one CPU process."""
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 1)
    worker = SimpleNamespace(
        device_name="cpu",
        engine=SimpleNamespace(get_data_parallel_group=lambda: None),
        flops_counter=SimpleNamespace(estimate_flops=lambda *args, **kwargs: (1.0, 2.0)),
    )
    output = {
        "loss": [0.1],
        "model_output": {},
        "metrics": {**dict.fromkeys(loss_metrics, 0.0), "grad_norm": 1.0, "lr": 1e-6},
    }
    out = TrainingWorker._postprocess_output(
        worker,
        output,
        global_token_num=[5],
        delta_time=1.0,
        forward_only=False,
        images_seqlens=None,
    )
    return set(tu.get(out, "metrics"))


@pytest.mark.parametrize(
    ("loss", "entropy"),
    [("llm_replay_tis", False), ("llm_replay_grpo", True), ("vanilla", False)],
)
def test_the_stub_worker_returns_the_keys_verls_worker_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loss: str, entropy: bool
) -> None:
    extra = ["actor_rollout_ref.actor.calculate_entropy=true"] if entropy else []
    trainer, _, workers = build_trainer(tmp_path, *method(loss, *extra), dp=DP)
    returned: list[dict[str, Any]] = []
    update = workers.update_actor
    workers.update_actor = lambda batch: returned.append(update(batch)) or returned[-1]
    run_steps(trainer, 1)
    loss_keys = verl_loss_keys(actor_config(trainer.config), entropy=entropy)
    expected = loss_keys | verl_worker_keys(loss_keys, monkeypatch)
    assert len(returned) == 1
    metrics = returned[0]["metrics"]
    assert set(metrics) == expected
    assert ("actor/entropy_loss" in metrics) == entropy
    rows = len(workers.updates[0]["keys"])
    mini_batches = rows // (2 * 4)  # ppo_mini_batch_size 2 × n 4
    assert {k: len(v) for k, v in metrics.items()} == {
        k: 1 if k == "lr" else mini_batches for k in expected
    }
    # what the method reads is what reported_signals says verl reports under this config
    read = set(trainer.replay_buffer.host.signals.step) & set(STEP_KEYS)
    assert read == reported_signals(trainer.config)


def test_a_clipped_losss_clip_fraction_reaches_anneal_through_verls_update_actor(
    tmp_path: Path,
) -> None:
    trainer, _, _ = build_trainer(
        tmp_path,
        *method(
            "llm_replay_grpo",
            f"+{SAMPLER}.anneal.enabled=true",
            f"+{SAMPLER}.anneal.mode=signals",
            f"+{SAMPLER}.anneal.clip_max=0.001",
        ),
        dp=DP,
    )
    logged = run_steps(trainer, 1)
    host = trainer.replay_buffer.host
    step = host.signals.step
    assert step["clip_fraction"] == pytest.approx(logged[-1]["actor/llm_replay_clip_fraction"])
    assert step["clip_fraction"] > 0.001
    assert step["loss"] == pytest.approx(logged[-1]["actor/pg_loss"])
    assert step["grad_norm"] == pytest.approx(logged[-1]["actor/grad_norm"])
    assert step["sampled_nll"] > 0 and step["kl_behaviour"] > 0
    anneal = next(o for o in host.pipeline.options if o.name == "anneal")
    assert anneal.readings()["clip"]


@pytest.mark.parametrize("calculate", [True, False])
def test_the_entropy_reaches_the_method_only_when_verl_computes_it(
    tmp_path: Path, calculate: bool
) -> None:
    """Bypass mode: verl skips its old-policy forward (no `actor/entropy`); the worker computes
    the training forward's entropy (`actor/entropy_loss`) only with calculate_entropy, and it is
    then the mean token entropy, which our learner reports."""
    trainer, _, workers = build_trainer(
        tmp_path,
        *method("llm_replay_tis", f"actor_rollout_ref.actor.calculate_entropy={calculate}"),
        dp=DP,
    )
    logged = run_steps(trainer, 1)
    step = trainer.replay_buffer.host.signals.step
    assert "actor/entropy" not in logged[-1]
    if calculate:
        expected = float(np.mean(workers.updates[-1]["token_entropy"]))
        assert logged[-1]["actor/entropy_loss"] == pytest.approx(expected, rel=1e-5)
        assert step["entropy"] == pytest.approx(expected, rel=1e-5)
    else:
        assert "actor/entropy_loss" not in logged[-1]
        assert "entropy" not in step


def test_step_statistics_read_what_each_mode_of_verl_reports() -> None:
    metrics = {
        "actor/llm_replay_clip_fraction": 0.2,
        "actor/llm_replay_sampled_nll": 1.5,
        "actor/llm_replay_kl_behaviour": 0.01,
        "actor/entropy": 0.8,  # the old-policy forward's: verl adds it outside bypass mode
        "actor/grad_norm": 3.0,
        "actor/pg_loss": -0.1,
    }
    decoupled = step_statistics(metrics, behaviour=False)
    assert decoupled == {
        "loss/clip_fraction": 0.2,
        "loss/sampled_nll": 1.5,  # the current policy's alone: read without bypass
        "loss/entropy": 0.8,
        "loss/grad_norm": 3.0,
        "loss/policy": -0.1,
    }
    both = step_statistics({**metrics, "actor/entropy_loss": 0.6}, behaviour=True)
    assert both["loss/entropy"] == 0.6  # the training forward's, when the worker computes it
    assert both["loss/kl_behaviour"] == 0.01
    assert "loss/entropy" not in step_statistics(metrics, behaviour=False, token_mean=False)
    assert step_statistics({"actor/pg_clipfrac": 0.1}, behaviour=True) == {
        "loss/clip_fraction": 0.1
    }


def replay_of(config: Any) -> Any:
    return SamplerSettings.from_kwargs(config.trainer.v1.sampler.sampler_kwargs).replay


ANNEAL = [f"+{SAMPLER}.anneal.enabled=true", f"+{SAMPLER}.anneal.mode=signals"]


def test_anneals_clip_max_with_a_loss_that_does_not_clip_is_refused_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clip = f"+{SAMPLER}.anneal.clip_max=0.2"
    config = verl_config(*method("llm_replay_tis", *ANNEAL, clip))
    problems = missing_signals(config, replay_of(config))
    assert len(problems) == 1
    assert "sampler_kwargs.anneal.clip_max = 0.2: loss_mode llm_replay_tis" in problems[0]
    for fine in (
        method("llm_replay_grpo", *ANNEAL, clip),  # clips
        method("llm_replay_tis", *ANNEAL),  # clip_max unset
        method("llm_replay_tis", ANNEAL[0], f"+{SAMPLER}.anneal.mode=schedule", clip),
    ):
        config = verl_config(*fine)
        assert missing_signals(config, replay_of(config)) == []
    guard = verl_config(*method("llm_replay_grpo", *ANNEAL, f"+{SAMPLER}.anneal.guard=true"))
    problems = missing_signals(guard, replay_of(guard))
    assert len(problems) == 1 and "sampler_kwargs.anneal.guard = True" in problems[0]
    with caplog.at_level(logging.WARNING):
        config = verl_config(*method("vanilla", *ANNEAL))  # verl's loss: no log-ratio moment
        assert missing_signals(config, replay_of(config)) == []
    assert "m2 reading" in caplog.text


def test_reported_signals_follow_verls_config() -> None:
    base = {"grad_norm", "loss", "sampled_nll"}
    behaviour = {"kl_behaviour", "log_ratio_m2", "ratio_mean", "ratio_max"}
    tis = verl_config(*method("llm_replay_tis"))
    assert reported_signals(tis) == base | behaviour
    entropy = verl_config(
        *method("llm_replay_tis", "actor_rollout_ref.actor.calculate_entropy=true")
    )
    assert reported_signals(entropy) == base | behaviour | {"entropy"}
    seq_mean = verl_config(
        *method(
            "llm_replay_tis",
            "actor_rollout_ref.actor.calculate_entropy=true",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        )
    )
    assert "entropy" not in reported_signals(seq_mean)  # not the mean token entropy
    decoupled = verl_config(
        *method("llm_replay_grpo", "algorithm.rollout_correction.bypass_mode=false")
    )
    assert reported_signals(decoupled) == base | {"clip_fraction", "entropy"}
