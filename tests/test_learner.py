"""The learner: micro-batching gives the full batch's gradient; on fresh rollouts r = 1."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.learner import Learner, LearnerSettings
from llm_replay.models import load_policy


def sample_for(model, rng: np.random.Generator, n: int = 12) -> Sample:  # type: ignore[no-untyped-def]
    prompt_lengths = rng.integers(3, 8, n)
    completion_lengths = rng.integers(1, 6, n)
    batch = RolloutBatch.from_flat(
        prompt_ids=rng.integers(3, 20, prompt_lengths.sum()).astype(np.int32),
        prompt_lengths=prompt_lengths,
        completion_ids=rng.integers(3, 20, completion_lengths.sum()).astype(np.int32),
        completion_lengths=completion_lengths,
        behaviour_logprobs=-rng.random(completion_lengths.sum()).astype(np.float32),
        rewards=rng.random(n),
        group_ids=np.arange(n) // 4,
        policy_versions=np.zeros(n, np.int64),
    )
    return Sample.from_batch(batch.with_advantages(rng.normal(size=n)), current_version=0)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "token_sum_norm"])
def test_micro_batches_sum_to_the_full_batch_gradient(aggregation: str) -> None:
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(0))
    grads = []
    for micro in (12, 5):
        m = copy.deepcopy(model)
        optimizer = torch.optim.SGD(m.parameters(), lr=0.0)
        learner = Learner(
            m,
            optimizer,
            LearnerSettings(aggregation=aggregation, micro_batch_size=micro, grad_clip=0),
        )
        metrics = learner.step(sample)
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None]))
        assert learner.version == 1
        assert metrics["train/rollouts"] == 12
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_kl_and_entropy_terms_and_errors() -> None:
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(1))
    learner = Learner(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        LearnerSettings(kl_coef=0.1, entropy_coef=0.01),
    )
    first = learner.step(sample)
    assert first["loss/kl_reference"] == pytest.approx(0.0, abs=1e-6)  # reference = initial weights
    second = learner.step(sample)
    assert second["loss/kl_reference"] > 0 and second["loss/entropy"] > 0
    nan = dataclasses.replace(sample, advantages=np.full(12, np.nan))
    with pytest.raises(ValueError, match="advantages: NaN"):
        learner.step(nan)


def test_the_covariance_of_log_prob_and_advantage_by_hand() -> None:
    from llm_replay.learner import CovarianceSums

    sums = CovarianceSums()
    logprobs = torch.tensor([[-1.0, -2.0], [-3.0, -4.0], [-5.0, -6.0]])
    advantages = torch.tensor([1.0, -1.0, 2.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    sums.add(logprobs[:2], advantages[:2], mask[:2], torch.tensor([False, False]))
    sums.add(logprobs[2:], advantages[2:], mask[2:], torch.tensor([True]))
    # fresh tokens (-1, 1), (-2, 1), (-3, -1), (-4, -1): E[lA] = 1, E[l] = -2.5, E[A] = 0
    assert sums.metrics() == {"loss/cov_fresh": pytest.approx(1.0)}  # one replayed token only
    sums.add(logprobs[:1], advantages[:1], mask[:1], torch.tensor([True]))
    # replayed tokens (-5, 2), (-1, 1), (-2, 1): E[lA] = -13/3, E[l] = -8/3, E[A] = 4/3
    assert sums.metrics()["loss/cov_replayed"] == pytest.approx(-13 / 3 + (8 / 3) * (4 / 3))


def test_the_learner_reports_the_covariance_the_same_in_any_micro_batching() -> None:
    model, _ = load_policy("builtin:tiny-chain-sum")
    base = sample_for(model, np.random.default_rng(2))
    sample = dataclasses.replace(
        base, sources=(np.arange(len(base)) % 2).astype(base.sources.dtype)
    )
    readings = []
    for micro in (12, 5):
        m = copy.deepcopy(model)
        learner = Learner(
            m, torch.optim.SGD(m.parameters(), lr=0.0), LearnerSettings(micro_batch_size=micro)
        )
        metrics = learner.step(sample)
        readings.append((metrics["loss/cov_fresh"], metrics["loss/cov_replayed"]))
    assert readings[0] == pytest.approx(readings[1], rel=1e-4)


def test_a_token_control_reaches_the_loss_and_leaves_fresh_rows_alone() -> None:
    from llm_replay.algorithms.token_control import TokenControl

    model, _ = load_policy("builtin:tiny-chain-sum")
    fresh = sample_for(model, np.random.default_rng(3))
    mixed = dataclasses.replace(
        fresh, sources=(np.arange(len(fresh)) % 2).astype(fresh.sources.dtype)
    )
    control = TokenControl(mode="clip_cov", fraction=0.5, low=-1e9, high=1e9, positive_weight=0.1)
    grads, treated = [], []
    for sample, settings in (
        (fresh, LearnerSettings(grad_clip=0)),
        (fresh, LearnerSettings(grad_clip=0, control=control)),
        (mixed, LearnerSettings(grad_clip=0, control=control)),
    ):
        m = copy.deepcopy(model)
        metrics = Learner(m, torch.optim.SGD(m.parameters(), lr=0.0), settings).step(sample)
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None]))
        treated.append(metrics.get("loss/cov_treated"))
    torch.testing.assert_close(grads[0], grads[1])  # no replayed row: nothing to treat
    assert treated[1] == 0.0 and treated[2] > 0
    assert not torch.allclose(grads[0], grads[2])
