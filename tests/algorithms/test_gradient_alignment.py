"""The replay-gradient reading: the learner's cosine equal to the one taken from each kind of
row's own gradient, the full step unchanged, nothing read without both kinds, and the pooled mean
with its standard error by hand."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from llm_replay.algorithms.gradient_alignment import alignment_rows
from llm_replay.algorithms.replay_value import PooledMean
from llm_replay.learner import Learner, LearnerSettings
from llm_replay.models import load_policy
from tests.test_learner import sample_for


def test_a_reading_needs_both_fresh_and_replayed_rows() -> None:
    mask = alignment_rows(np.array([True, False, True]))
    assert mask is not None and list(mask) == [True, False, True]
    assert alignment_rows(np.ones(4, bool)) is None
    assert alignment_rows(np.zeros(4, bool)) is None


def flat_gradient(model) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_the_learners_cosine_is_the_two_kinds_own_gradients() -> None:
    """Groups 0 and 1 fresh, group 2 replayed (age 1), micro-batches of 5 rows so that each kind
    spans several. Each kind's own gradient is the step's with the other rows' advantages at 0
    (the GRPO loss is linear in them); the reading must be their cosine, and the whole step's
    gradient the same as without the reading."""
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(3))
    replayed = sample.group_ids == 2
    sample = dataclasses.replace(sample, ages=replayed.astype(np.int64))
    settings = LearnerSettings(micro_batch_size=5, grad_clip=0)

    def gradient(keep: np.ndarray | None, reading: bool) -> tuple[torch.Tensor, dict[str, float]]:
        m = copy.deepcopy(model)
        learner = Learner(
            m,
            torch.optim.SGD(m.parameters(), lr=0.0),
            dataclasses.replace(settings, replay_gradient=reading),
        )
        rows = sample
        if keep is not None:
            rows = dataclasses.replace(sample, advantages=np.where(keep, sample.advantages, 0.0))
        metrics = learner.step(rows)
        return flat_gradient(m), metrics

    whole, plain = gradient(None, False)
    read, metrics = gradient(None, True)
    torch.testing.assert_close(read, whole, rtol=1e-4, atol=1e-6)
    assert "loss/replay_cosine" not in plain
    fresh, replay = gradient(~replayed, False)[0], gradient(replayed, False)[0]
    expected = float(fresh @ replay / (fresh.norm() * replay.norm()))
    assert metrics["loss/replay_cosine"] == pytest.approx(expected, rel=1e-3, abs=1e-5)


def test_a_batch_without_replayed_rows_reads_nothing() -> None:
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(4))
    learner = Learner(
        model, torch.optim.SGD(model.parameters(), lr=0.0), LearnerSettings(replay_gradient=True)
    )
    assert "loss/replay_cosine" not in learner.step(sample)


def test_the_pooled_mean_and_its_error_by_hand() -> None:
    """0.1, 0.3, 0.5: mean 0.3, s² = (0.04 + 0 + 0.04) / 2, SE = √(0.04 / 3)."""
    pooled = PooledMean()
    pooled.add(0.1)
    pooled.add(0.3)
    assert pooled.estimate() is None  # below three values
    pooled.add(0.5)
    pooled.add(float("nan"))  # skipped
    estimate = pooled.estimate()
    assert estimate is not None
    assert estimate[0] == pytest.approx(0.3)
    assert estimate[1] == pytest.approx((0.04 / 3) ** 0.5)
    restored = PooledMean()
    restored.load_state(pooled.state())
    assert restored.estimate() == estimate and restored.count == 3
