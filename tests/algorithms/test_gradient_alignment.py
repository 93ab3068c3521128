"""The replay-gradient reading: rows split by class with groups kept whole, the learner's two
inner products equal to the ones taken from each class's own gradient, the full step unchanged,
and the pooled value with its standard error by hand."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from llm_replay.algorithms.gradient_alignment import (
    FRESH_A,
    FRESH_B,
    REPLAYED,
    alignment_classes,
)
from llm_replay.algorithms.replay_value import ReplayValue
from llm_replay.learner import Learner, LearnerSettings
from llm_replay.models import load_policy
from tests.test_learner import sample_for


def test_classes_keep_groups_whole_and_need_every_class() -> None:
    groups = np.array([7, 7, 8, 8, 9, 9, 3, 3])
    fresh = np.array([True] * 6 + [False] * 2)
    classes = alignment_classes(fresh, groups)
    assert classes is not None
    assert list(classes) == [
        FRESH_A,
        FRESH_A,
        FRESH_B,
        FRESH_B,
        FRESH_A,
        FRESH_A,
        REPLAYED,
        REPLAYED,
    ]
    assert alignment_classes(np.ones(8, bool), groups) is None  # nothing replayed
    assert alignment_classes(np.zeros(8, bool), groups) is None  # nothing fresh
    one_group = np.array([True, True] + [False] * 6)
    assert alignment_classes(one_group, groups) is None  # no two halves to compare


def flat_gradient(model) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_the_learners_reading_is_the_classes_own_gradients() -> None:
    """Groups 0 and 1 fresh, group 2 replayed (age 1). Each class's own gradient is the step's
    with the other rows' advantages at 0 (the GRPO loss is linear in them); the reading must be
    ⟨g_R, g_A + g_B⟩ N² / (n_R n_F) and ⟨g_A, g_B⟩ N² / (n_A n_B), and the whole step's gradient
    the same as without the reading."""
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(3))
    group = sample.group_ids
    sample = dataclasses.replace(sample, ages=np.where(group == 2, 1, 0).astype(np.int64))
    settings = LearnerSettings(micro_batch_size=5, grad_clip=0)

    def gradient(keep: np.ndarray | None, reading: bool) -> tuple[torch.Tensor, dict[str, float]]:
        m = copy.deepcopy(model)
        learner = Learner(
            m,
            torch.optim.SGD(m.parameters(), lr=0.0),
            dataclasses.replace(settings, replay_gradient=reading),
        )
        rows = (
            sample
            if keep is None
            else dataclasses.replace(sample, advantages=np.where(keep, sample.advantages, 0.0))
        )
        metrics = learner.step(rows)
        return flat_gradient(m), metrics

    whole, plain = gradient(None, False)
    read, metrics = gradient(None, True)
    torch.testing.assert_close(read, whole, rtol=1e-4, atol=1e-6)
    assert "loss/replay_alignment" not in plain
    classes = alignment_classes(group != 2, group)
    assert classes is not None
    g = {c: gradient(classes == c, False)[0] for c in (FRESH_A, FRESH_B, REPLAYED)}
    tokens = sample.loss_mask.sum(1)
    n = {c: float(tokens[classes == c].sum()) for c in g}
    total = sum(n.values()) ** 2
    fresh = g[FRESH_A] + g[FRESH_B]
    replay = float(g[REPLAYED] @ fresh) * total / (n[REPLAYED] * (n[FRESH_A] + n[FRESH_B]))
    halves = float(g[FRESH_A] @ g[FRESH_B]) * total / (n[FRESH_A] * n[FRESH_B])
    assert metrics["loss/replay_alignment"] == pytest.approx(replay, rel=1e-3, abs=1e-6)
    assert metrics["loss/fresh_alignment"] == pytest.approx(halves, rel=1e-3, abs=1e-6)


def test_a_batch_without_replayed_rows_reads_nothing() -> None:
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(4))
    learner = Learner(
        model, torch.optim.SGD(model.parameters(), lr=0.0), LearnerSettings(replay_gradient=True)
    )
    assert "loss/replay_alignment" not in learner.step(sample)


def test_the_pooled_value_and_its_error_by_hand() -> None:
    """Steps (r, f) = (1, 2), (0, 2), (2, 2): value 3 / 6 = 0.5; residuals r − 0.5 f = 0, −1, 1,
    so SE = √(2 · 3 / 2) / 6."""
    value = ReplayValue()
    value.add(1.0, 2.0)
    value.add(0.0, 2.0)
    assert value.estimate() is None  # below three steps
    value.add(2.0, 2.0)
    value.add(float("nan"), 1.0)  # skipped
    estimate = value.estimate()
    assert estimate is not None
    assert estimate[0] == pytest.approx(0.5)
    assert estimate[1] == pytest.approx(3.0**0.5 / 6)
    restored = ReplayValue()
    restored.load_state(value.state())
    assert restored.estimate() == estimate and restored.steps == 3
    negative = ReplayValue()
    for _ in range(4):
        negative.add(1.0, -1.0)
    assert negative.estimate() is None  # the fresh rows disagree with themselves: no unit
