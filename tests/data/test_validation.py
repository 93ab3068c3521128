"""Bad input never gets in, and never gets in halfway: every constructor path validates.

One test per class of defect the acceptance suite found (issue "Nothing lost, no traceback"): the
plain constructor skipping validation, nested rows, integers that wrapped when narrowed, empty
rows with `allow_empty`, and validated arrays changed in place afterwards.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import InvalidRolloutError, Rollout
from tests.conftest import make_batch

COLUMNS = [f.name for f in dataclasses.fields(RolloutBatch) if f.name != "allow_empty"]


def columns(batch: RolloutBatch, **changes: Any) -> dict[str, Any]:
    """The plain constructor's arguments for `batch`, as writable copies, with `changes`."""
    values: dict[str, Any] = {
        name: (np.array(getattr(batch, name)) if name != "task_names" else batch.task_names)
        for name in COLUMNS
    }
    values.update(changes)
    return values


@pytest.fixture
def batch(rng: np.random.Generator) -> RolloutBatch:
    return make_batch(rng, 4)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: {"rewards": np.array([0.0, np.nan, 1.0, 0.0])}, "rollouts[1].reward"),
        (lambda b: {"advantages": np.array([0.0, 0.0, np.inf, 0.0])}, "rollouts[2].advantage"),
        (lambda b: {"group_ids": np.array([0, 0, -1, 0])}, "rollouts[2].group_id"),
        (
            lambda b: {"behaviour_logprobs": np.abs(b.behaviour_logprobs) + 0.5},
            "rollouts[0].behaviour_logprobs[0]",
        ),
        (
            lambda b: {"completion_ids": np.where(np.arange(b.completion_ids.size) == 3, -7, 1)},
            "completion_ids[",
        ),
        (
            lambda b: {"completion_lengths": b.completion_lengths + 1},
            "completion_ids",
        ),
        (lambda b: {"correct": np.array([0, 1, 300, 0])}, "rollouts[2].correct"),
        (lambda b: {"finish_reasons": np.array([0, 0, 9, 0])}, "rollouts[2].finish_reason"),
        (lambda b: {"task_codes": np.array([0, 0, 0, 70000])}, "rollouts[3].task_code"),
        (lambda b: {"policy_versions": np.array([2**64 - 1] * 4, dtype=np.uint64)}, "policy_"),
    ],
)
def test_plain_constructor_validates(batch: RolloutBatch, change: Any, field: str) -> None:
    with pytest.raises(InvalidRolloutError) as error:
        RolloutBatch(**columns(batch, **change(batch)))
    assert field in error.value.field or field in str(error.value)


def test_validated_arrays_are_read_only(batch: RolloutBatch) -> None:
    with pytest.raises(ValueError, match="read-only"):
        batch.rewards[0] = np.nan
    with pytest.raises(ValueError, match="read-only"):
        batch.completion_ids[0] = -1
    mine = np.array(batch.rewards)
    copy = RolloutBatch(**columns(batch, rewards=mine))
    mine[0] = 5.0  # the caller's array stays theirs to write
    assert not copy.rewards.flags.writeable
    r = Rollout([1], [2], [-0.1], 1.0, 0, 0)
    with pytest.raises(ValueError, match="read-only"):
        r.completion_ids[0] = -1


def ragged(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "prompt_ids": [[1, 2], [3]],
        "completion_ids": [[4], [5, 6]],
        "behaviour_logprobs": [[-0.1], [-0.2, -0.3]],
        "rewards": [1.0, 0.0],
        "group_ids": [0, 0],
        "policy_versions": [0, 0],
    }
    values.update(changes)
    return values


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"completion_ids": [[4], [[5, 6]]]}, "rollouts[1].completion_ids"),
        ({"completion_ids": [[4], [[5], [6, 7]]]}, "rollouts[1].completion_ids"),
        ({"completion_ids": [[4], "ab"]}, "rollouts[1].completion_ids"),
        ({"completion_ids": [[4], 5]}, "rollouts[1].completion_ids"),
        ({"completion_ids": [[4.0], [5, 6]]}, "rollouts[0].completion_ids"),
        ({"prompt_ids": [[1, 2], [2**40]]}, "rollouts[1].prompt_ids[0]"),
        ({"prompt_ids": [[1, 2], [2**64 - 1]]}, "rollouts[1].prompt_ids"),
        ({"behaviour_logprobs": [[-0.1], [-0.2, -1e300]]}, "rollouts[1].behaviour_logprobs[1]"),
        ({"behaviour_logprobs": [[-0.1], [-0.2, 1e-50]]}, "rollouts[1].behaviour_logprobs[1]"),
        ({"behaviour_logprobs": [[-0.1], [-0.2]]}, "rollouts[1].behaviour_logprobs"),
        ({"completion_ids": 7}, "completion_ids"),
        ({"rewards": [1.0, None]}, "rewards"),
        ({"group_ids": [0, 2**63]}, "group_id"),
        ({"correct": [True, 0.5]}, "correct"),
        ({"finish_reasons": ["stop", 3]}, "rollouts[1].finish_reason"),
        ({"tasks": ["a", 3]}, "rollouts[1].task"),
    ],
)
def test_ragged_rows_are_checked_and_named(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRolloutError) as error:
        RolloutBatch.from_ragged(**ragged(**changes))
    assert field in str(error.value)


@pytest.mark.parametrize("length", [2**32 + 4, 2**31, 2**63 - 1])
def test_lengths_never_wrap(length: int) -> None:
    with pytest.raises(InvalidRolloutError, match=r"completion_lengths = \d+: must be <="):
        RolloutBatch.from_flat(
            prompt_ids=[1],
            prompt_lengths=[1],
            completion_ids=[1, 2, 3, 4],
            completion_lengths=[length],
            behaviour_logprobs=[-1.0] * 4,
            rewards=[0.0],
            group_ids=[0],
            policy_versions=[0],
        )


def test_empty_rows_with_allow_empty() -> None:
    values = ragged(completion_ids=[[4], []], behaviour_logprobs=[[-0.1], []])
    with pytest.raises(InvalidRolloutError, match="allow_empty"):
        RolloutBatch.from_ragged(**values)
    batch = RolloutBatch.from_ragged(**values, allow_empty=True)
    assert batch.completion_lengths.tolist() == [1, 0]
    assert batch.completion_ids.dtype == np.int32
    every_row_empty = ragged(completion_ids=[[], []], behaviour_logprobs=[[], []])
    assert RolloutBatch.from_ragged(**every_row_empty, allow_empty=True).completion_ids.size == 0
    # batches derived from an admitted one keep admitting its empty rows
    assert len(RolloutBatch.concat([batch, batch.select([1])])) == 3


def test_one_rollout_integers_are_range_checked() -> None:
    with pytest.raises(InvalidRolloutError, match="policy_version"):
        Rollout([1], [2], [-0.1], 1.0, 0, 2**64)
    with pytest.raises(InvalidRolloutError, match="reward"):
        Rollout([1], [2], [-0.1], 10**400, 0, 0)


@pytest.mark.parametrize(
    ("id_dtype", "logprob_dtype"),
    [("int32", "float32"), ("int64", "float64"), ("uint16", "float16"), ("int32", "float64")],
)
def test_numpy_rows_take_the_fast_path_and_match_the_checked_one(
    id_dtype: str, logprob_dtype: str
) -> None:
    """Rows given as numpy arrays of one dtype skip the per-row checks; the batch must be the
    same as from plain lists, and bad values are still named by row and position."""
    from llm_replay.data.batch import RolloutBatch
    from llm_replay.data.validation import _numpy_rows

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 9, 12)
    prompts = [rng.integers(0, 500, 3).astype(id_dtype) for _ in lengths]
    completions = [rng.integers(0, 500, n).astype(id_dtype) for n in lengths]
    logprobs = [(-rng.random(n)).astype(logprob_dtype) for n in lengths]
    assert _numpy_rows(completions, "iu") is not None
    common = {"rewards": np.zeros(12), "group_ids": np.arange(12), "policy_versions": 0}
    fast = RolloutBatch.from_ragged(
        prompt_ids=prompts,
        completion_ids=completions,
        behaviour_logprobs=logprobs,
        allow_empty=True,
        **common,
    )
    slow = RolloutBatch.from_ragged(
        prompt_ids=[p.tolist() for p in prompts],
        completion_ids=[c.tolist() for c in completions],
        behaviour_logprobs=[lp.astype(np.float64).tolist() for lp in logprobs],
        allow_empty=True,
        **common,
    )
    for column in ("prompt_ids", "completion_ids", "completion_lengths", "behaviour_logprobs"):
        np.testing.assert_array_equal(getattr(fast, column), getattr(slow, column))
    bad = [*completions[:-1], np.array([1, -3], dtype="int32")]
    with pytest.raises(InvalidRolloutError, match=r"rollouts\[11\]\.completion_ids\[1\] = -3"):
        RolloutBatch.from_ragged(
            prompt_ids=prompts,
            completion_ids=bad,
            behaviour_logprobs=[*logprobs[:-1], np.zeros(2, logprob_dtype)],
            allow_empty=True,
            **common,
        )
