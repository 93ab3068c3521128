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
