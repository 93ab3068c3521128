from __future__ import annotations

import numpy as np
import pytest

from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import Group, InvalidRolloutError, Rollout


def rollout(**overrides: object) -> Rollout:
    values: dict[str, object] = {
        "prompt_ids": [1, 2, 3],
        "completion_ids": [4, 5],
        "behaviour_logprobs": [-0.5, -1.0],
        "reward": 1.0,
        "group_id": 7,
        "policy_version": 2,
        "advantage": 0.25,
        "task": "chain_sum",
        "correct": True,
        "finish_reason": "stop",
    }
    values.update(overrides)
    return Rollout(**values)  # type: ignore[arg-type]


def test_valid_rollout_normalises_dtypes() -> None:
    r = rollout()
    assert r.prompt_ids.dtype == np.int32
    assert r.behaviour_logprobs.dtype == np.float32
    assert r.num_tokens == 5
    assert r.metadata == {"task": "chain_sum", "correct": True, "finish_reason": "stop"}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"behaviour_logprobs": [-0.5]}, "behaviour_logprobs"),
        ({"behaviour_logprobs": [-0.5, 0.1]}, "behaviour_logprobs[1]"),
        ({"behaviour_logprobs": [float("nan"), -1.0]}, "behaviour_logprobs[0]"),
        ({"behaviour_logprobs": [-np.inf, -1.0]}, "behaviour_logprobs[0]"),
        ({"prompt_ids": [1, -2]}, "prompt_ids"),
        ({"prompt_ids": [1.5, 2.0]}, "prompt_ids"),
        ({"prompt_ids": []}, "prompt_ids"),
        ({"completion_ids": [], "behaviour_logprobs": []}, "completion_ids"),
        ({"reward": float("nan")}, "reward"),
        ({"reward": "1"}, "reward"),
        ({"advantage": float("inf")}, "advantage"),
        ({"group_id": -1}, "group_id"),
        ({"policy_version": -3}, "policy_version"),
        ({"policy_version": True}, "policy_version"),
        ({"finish_reason": "eos"}, "finish_reason"),
        ({"correct": "yes"}, "correct"),
        ({"task": 3}, "task"),
    ],
)
def test_invalid_rollout_names_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRolloutError) as info:
        rollout(**overrides)
    assert info.value.field == field
    assert field in str(info.value)


def test_empty_completion_allowed_when_flagged() -> None:
    r = rollout(completion_ids=[], behaviour_logprobs=[], allow_empty=True, finish_reason="abort")
    assert r.completion_ids.size == 0


def test_group_requires_shared_prompt_and_id() -> None:
    a = rollout()
    assert len(Group([a, rollout(reward=0.0)])) == 2
    with pytest.raises(InvalidRolloutError, match=r"rollouts\[1\]\.group_id"):
        Group([a, rollout(group_id=8)])
    with pytest.raises(InvalidRolloutError, match=r"rollouts\[1\]\.prompt_ids"):
        Group([a, rollout(prompt_ids=[9, 9])])
    with pytest.raises(InvalidRolloutError):
        Group([])


def test_batch_round_trips_rollouts() -> None:
    items = [
        rollout(),
        rollout(
            completion_ids=[9],
            behaviour_logprobs=[-2.0],
            task="other",
            correct=None,
            advantage=None,
            finish_reason="length",
        ),
    ]
    batch = RolloutBatch.from_rollouts(items)
    assert len(batch) == 2
    assert batch.num_tokens == 9
    assert batch.rollouts() == items
    assert batch[1] == items[1]
    assert batch[-1] == items[1]
    assert RolloutBatch.coerce(Group([items[0]])).rollouts() == [items[0]]


def test_batch_select_concat_and_advantages(rng: np.random.Generator) -> None:
    from tests.conftest import make_batch

    a = make_batch(rng, 6)
    b = make_batch(rng, 3, first_group=10)
    both = RolloutBatch.concat([a, b])
    assert both.rollouts() == a.rollouts() + b.rollouts()
    picked = both.select([7, 0])
    assert picked.rollouts() == [both[7], both[0]]
    updated = a.with_advantages(np.arange(6.0))
    assert [r.advantage for r in updated] == list(np.arange(6.0))
    with pytest.raises(InvalidRolloutError):
        a.with_advantages([np.nan] * 6)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"behaviour_logprobs": [[-1.0], [-1.0, 0.5]]}, r"rollouts\[1\]\.behaviour_logprobs\[1\]"),
        ({"behaviour_logprobs": [[-1.0], [-1.0]]}, r"rollouts\[1\]\.behaviour_logprobs"),
        ({"completion_ids": [[3], [4, -5]]}, r"rollouts\[1\]\.completion_ids\[1\]"),
        ({"rewards": [0.0, np.inf]}, r"rollouts\[1\]\.reward"),
        ({"group_ids": [0, -1]}, r"rollouts\[1\]\.group_id"),
        ({"finish_reasons": ["stop", "nope"]}, r"rollouts\[1\]\.finish_reason"),
        ({"rewards": [0.0]}, "rewards"),
    ],
)
def test_batch_validation_names_row(change: dict[str, object], match: str) -> None:
    values: dict[str, object] = {
        "prompt_ids": [[1, 2], [3]],
        "completion_ids": [[3], [4, 5]],
        "behaviour_logprobs": [[-1.0], [-1.0, -0.5]],
        "rewards": [0.0, 1.0],
        "group_ids": [0, 0],
        "policy_versions": [0, 0],
    }
    values.update(change)
    with pytest.raises(InvalidRolloutError, match=match):
        RolloutBatch.from_ragged(**values)  # type: ignore[arg-type]
