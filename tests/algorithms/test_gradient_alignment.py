"""The replay-gradient reading: groups holding both kinds of row left out, the learner's cosine
equal to the one taken from each kind's own gradient, the full step unchanged (KL-Cov's choice of
tokens included), nothing read without both kinds, and the pooled mean with its batch-means
error by hand."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from llm_replay.algorithms.gradient_alignment import FRESH, MIXED, REPLAYED, alignment_classes
from llm_replay.algorithms.replay_value import PooledMean
from llm_replay.algorithms.token_control import TokenControl
from llm_replay.learner import Learner, LearnerSettings
from llm_replay.models import load_policy
from tests.test_learner import sample_for


def test_groups_holding_both_kinds_are_read_by_neither_side() -> None:
    groups = np.array([1, 1, 2, 2, 3, 3])
    fresh = np.array([True, True, True, False, False, False])  # group 2 holds both
    classes = alignment_classes(fresh, groups)
    assert classes is not None
    assert list(classes) == [FRESH, FRESH, MIXED, MIXED, REPLAYED, REPLAYED]
    assert alignment_classes(np.ones(6, bool), groups) is None  # nothing replayed
    assert alignment_classes(np.zeros(6, bool), groups) is None  # nothing fresh
    only_mixed = np.array([True, False, True, False, True, False])
    assert alignment_classes(only_mixed, groups) is None  # every group holds both


def flat_gradient(model) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize(
    "control", [TokenControl(), TokenControl(mode="kl_cov", fraction=0.2, coef=1.0)]
)
def test_the_learners_cosine_is_the_two_kinds_own_gradients(control: TokenControl) -> None:
    """Group 0 fresh, group 2 replayed (age 1), group 1 both (left out of the reading); one
    micro-batch, as `auto` trains. Each kind's own gradient is the step's with the other rows'
    advantages at 0 (the GRPO loss is linear in them, and KL-Cov's term sits on replayed rows
    only); the reading must be their cosine, and the whole step's gradient the same as without
    the reading: KL-Cov must choose the same tokens when the rows train class by class."""
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(3))
    group = sample.group_ids
    aged = (group == 2) | ((group == 1) & (np.arange(len(group)) % 2 == 0))
    sample = dataclasses.replace(sample, ages=aged.astype(np.int64))
    settings = LearnerSettings(micro_batch_size=64, grad_clip=0, control=control)

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
    if control.active:
        assert metrics["loss/cov_treated"] == pytest.approx(plain["loss/cov_treated"])
        return  # the kinds' own gradients below hold for the linear loss alone
    fresh, replay = gradient(group == 0, False)[0], gradient(group == 2, False)[0]
    expected = float(fresh @ replay / (fresh.norm() * replay.norm()))
    assert metrics["loss/replay_cosine"] == pytest.approx(expected, rel=1e-3, abs=1e-5)


def test_a_batch_without_replayed_rows_reads_nothing() -> None:
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(4))
    learner = Learner(
        model, torch.optim.SGD(model.parameters(), lr=0.0), LearnerSettings(replay_gradient=True)
    )
    assert "loss/replay_cosine" not in learner.step(sample)


def test_the_pooled_mean_and_its_batch_means_error_by_hand() -> None:
    """Blocks of two: (0, 0.2), (0.2, 0.4), (0.4, 0.6), then 0.8 in an open block. Block means
    0.1, 0.3, 0.5: spread s² = 0.04, SE = √(0.04 / 3); the mean is every value's, 2.6 / 7."""
    pooled = PooledMean(block=2)
    for value in (0.0, 0.2, 0.2, 0.4):
        pooled.add(value)
    assert pooled.estimate() is None  # two closed blocks
    for value in (0.4, 0.6, 0.8, float("nan")):
        pooled.add(value)
    estimate = pooled.estimate()
    assert estimate is not None
    assert estimate[0] == pytest.approx(2.6 / 7)
    assert estimate[1] == pytest.approx((0.04 / 3) ** 0.5)
    restored = PooledMean()
    restored.load_state(pooled.state())
    assert restored.estimate() == estimate and restored.count == 7
    with pytest.raises(ValueError, match="block"):
        PooledMean(block=0)


def test_a_batch_anchor_treats_as_many_tokens_as_the_unsplit_batch_through_ties() -> None:
    """Every chosen token has the same covariance (two rows alike, in two pieces): unsplit,
    KL-Cov treats its budget, one token; anchored pieces must treat one between them too."""
    control = TokenControl(mode="kl_cov", fraction=0.25, coef=1.0)
    logprobs = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]])
    advantages = torch.tensor([1.0, 1.0])
    mask = torch.ones(2, 2)
    rows = torch.tensor([True, True])
    whole = control.select(logprobs, advantages, mask, rows)
    anchor = control.anchor(
        [logprobs[:1], logprobs[1:]],
        [advantages[:1], advantages[1:]],
        [mask[:1], mask[1:]],
        [rows[:1], rows[1:]],
    )
    pieces = [
        control.select(
            logprobs[i : i + 1],
            advantages[i : i + 1],
            mask[i : i + 1],
            rows[i : i + 1],
            anchor=anchor,
        )
        for i in range(2)
    ]
    assert int(whole.sum()) == 1 == sum(int(p.sum()) for p in pieces)
