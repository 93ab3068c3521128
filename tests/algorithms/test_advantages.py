from __future__ import annotations

import numpy as np
import pytest

from llm_replay.algorithms.advantages import dr_grpo, get_advantage_fn, group_advantages, grpo, rloo


def test_hand_computed_values() -> None:
    r = np.array([1.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(grpo(r, eps=0.0), [1, -1, -1, 1])
    np.testing.assert_allclose(dr_grpo(r), [0.5, -0.5, -0.5, 0.5])
    np.testing.assert_allclose(rloo(np.array([3.0, 0.0, 0.0])), [3.0, -1.5, -1.5])
    assert rloo(np.array([2.0])).tolist() == [0.0]
    np.testing.assert_allclose(grpo(np.array([1.0, 1.0])), [0.0, 0.0])


def test_group_advantages_scores_each_group_alone() -> None:
    rewards = np.array([1.0, 0.0, 5.0, 7.0])
    out = group_advantages(rewards, np.array([3, 3, 9, 9]), "dr_grpo")
    np.testing.assert_allclose(out, [0.5, -0.5, -1.0, 1.0])
    with pytest.raises(ValueError, match="advantage = 'nope'"):
        get_advantage_fn("nope")


def test_the_optimal_advantage_uses_a_value_between_the_groups_mean_and_its_best() -> None:
    from llm_replay.algorithms.advantages import optimal

    r = np.array([1.0, 0.0, 0.0, 1.0])
    value = 0.5 * np.log(0.5 * np.exp(2.0) + 0.5)  # 0.717: above the mean 0.5, below the best 1
    np.testing.assert_allclose(optimal(r), r - value)
    rare = optimal(np.array([1.0] + [0.0] * 7))  # one success in eight: it weighs more
    np.testing.assert_allclose(rare[:2], [0.706, -0.294], atol=1e-3)
    for group in (r, np.array([1.0] + [0.0] * 7), np.array([0.3, 0.9, 0.1])):
        assert optimal(group).sum() < 0  # every advantage below R − mean
    np.testing.assert_allclose(optimal(r, beta=1e6), dr_grpo(r), atol=1e-5)  # β → ∞: the mean
    np.testing.assert_allclose(optimal(r, beta=1e-3), r - 1.0, atol=1e-2)  # β → 0: the best
    big = optimal(np.array([1000.0, 999.0]))  # no overflow: log-sum-exp
    assert np.all(np.isfinite(big)) and big[0] < 0.5
    assert optimal(np.array([])).size == 0
    np.testing.assert_allclose(
        group_advantages(r, np.array([0, 0, 1, 1]), "optimal"),
        [
            1.0 - 0.5 * np.log(0.5 * np.exp(2.0) + 0.5),
            -0.5 * np.log(0.5 * np.exp(2.0) + 0.5),
            -0.5 * np.log(0.5 * np.exp(2.0) + 0.5),
            1.0 - 0.5 * np.log(0.5 * np.exp(2.0) + 0.5),
        ],
    )
