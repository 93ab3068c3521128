"""A rejected call leaves the table exactly as it was: contents, counters and RNG.

The fuzz test builds a valid batch, breaks one field of one row in a random way, and feeds it to
`insert` through a random constructor path (plain constructor, `from_flat`, `from_ragged`, a list
of `Rollout`s, raw garbage). Every attempt must raise `ValueError` naming something, and the
table's full state (`ReplayTable.state()`: manifest with counters and RNG, plus every array) must
be unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_replay.buffer import (
    Prioritized,
    ReplayTable,
    SampleToInsertRatio,
    Uniform,
)
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import InvalidRolloutError, Rollout
from tests.conftest import make_batch

TABLES = {
    "uniform": lambda: ReplayTable(64, sampler=Uniform(), max_tokens=4000, max_bytes=30_000),
    "prioritized": lambda: ReplayTable(64, sampler=Prioritized(alpha=1.0), max_age=5),
    "positive": lambda: ReplayTable.positive_biased(64, delta=0.3),
    "limited": lambda: ReplayTable(
        64,
        sampler=Uniform(replacement=False),
        rate_limiter=SampleToInsertRatio(1.0, 4, 40.0, max_insert_batch=12, max_sample_batch=8),
    ),
    "queue": lambda: ReplayTable.queue(40, max_insert_batch=16, max_sample_batch=8),
}
FLAT = [f.name for f in dataclasses.fields(RolloutBatch) if f.name != "allow_empty"]


def snapshot(table: ReplayTable) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    return table.state()


def assert_same(before: Any, after: Any) -> None:
    assert before[0] == after[0]
    assert before[1].keys() == after[1].keys()
    for name, array in before[1].items():
        assert np.array_equal(array, after[1][name], equal_nan=True), name


def filled(kind: str, rng: np.random.Generator) -> ReplayTable:
    table = TABLES[kind]()
    for i in range(3):
        table.insert(make_batch(rng, 8, first_group=2 * i), timeout=0)
    table.sample(4, timeout=0)
    return table


def flat_columns(batch: RolloutBatch) -> dict[str, Any]:
    return {
        name: (np.array(getattr(batch, name)) if name != "task_names" else batch.task_names)
        for name in FLAT
    }


BAD_VALUES = {
    "prompt_ids": [-1, 2**31, 2**40, 2**64 - 1, 1.5],
    "completion_ids": [-1, 2**31, 2**63 - 1, 0.5],
    "behaviour_logprobs": [0.5, np.nan, np.inf, -np.inf, 1e-30],
    "rewards": [np.nan, np.inf, -np.inf],
    "advantages": [np.inf, -np.inf],
    "group_ids": [-1, 2**64 - 1],
    "policy_versions": [-5, 2**64 - 1],
    "correct": [2, -2, 300],
    "finish_reasons": [3, 255],
    "task_codes": [1, -1, 40000],
    "prompt_lengths": [-1, 2**32 + 2, 2**31],
    "completion_lengths": [-1, 2**32 + 1, 2**40],
}


def break_flat(columns: dict[str, Any], field: str, value: Any, row: int) -> dict[str, Any]:
    """One element of `field` set to `value` (widening the array's dtype as needed)."""
    array = np.asarray(columns[field])
    if isinstance(value, float) or array.dtype.kind == "f":
        broken = array.astype(np.float64)
    else:  # wide enough to hold `value` (int64 and uint64 together widen to float64)
        broken = array.astype(np.result_type(array.dtype, np.min_scalar_type(value)))
    broken[row % len(broken)] = value
    return {**columns, field: broken}


def malformed(batch: RolloutBatch, path: str, field: str, choice: int, row: int) -> Any:
    """What `insert` receives: `batch` with one field of one row broken, through `path`."""
    values = BAD_VALUES[field]
    value = values[choice % len(values)]
    columns = flat_columns(batch)
    if path == "plain":
        return RolloutBatch(**break_flat(columns, field, value, row))
    if path == "from_flat":
        return RolloutBatch.from_flat(**break_flat(columns, field, value, row))
    if path == "shape":  # a column one row short, or nested one level deeper
        array = np.asarray(columns[field])
        return RolloutBatch(**{**columns, field: array[:-1] if choice % 2 else array[None, :]})
    if path == "from_ragged":
        rows = [r.completion_ids.tolist() for r in batch]
        target = row % len(rows)
        bad_id = BAD_VALUES["completion_ids"][choice % 4]
        rows[target] = [rows[target]] if choice % 2 else [*rows[target][:-1], bad_id]
        return RolloutBatch.from_ragged(
            prompt_ids=[r.prompt_ids for r in batch],
            completion_ids=rows,
            behaviour_logprobs=[r.behaviour_logprobs for r in batch],
            rewards=batch.rewards,
            group_ids=batch.group_ids,
            policy_versions=batch.policy_versions,
        )
    if path == "rollouts":
        items: list[Any] = batch.rollouts()
        items[row % len(items)] = {"not": "a rollout"} if choice % 2 else None
        return items
    return [1, 2, 3] if choice % 2 else "rollouts"


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(sorted(TABLES)),
    path=st.sampled_from(["plain", "from_flat", "from_ragged", "rollouts", "shape", "garbage"]),
    field=st.sampled_from(sorted(BAD_VALUES)),
    choice=st.integers(0, 4),
    row=st.integers(0, 50),
    seed=st.integers(0, 2**16),
)
def test_malformed_inserts_change_nothing(
    kind: str, path: str, field: str, choice: int, row: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    table = filled(kind, rng)
    before = snapshot(table)
    batch = make_batch(rng, 6, first_group=100)
    with pytest.raises(ValueError, match=r"\w") as error:  # InvalidRolloutError is a ValueError
        table.insert(malformed(batch, path, field, choice, row), timeout=0)
    assert str(error.value)
    assert_same(before, snapshot(table))
    table.insert(make_batch(rng, 4, first_group=200), timeout=0)  # still works


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_batches_the_table_cannot_take_change_nothing(kind: str) -> None:
    rng = np.random.default_rng(5)
    table = filled(kind, rng)
    before = snapshot(table)
    cases = [make_batch(rng, 65)]  # more than max_rollouts
    if kind == "uniform":
        cases += [
            make_batch(rng, 60, completion=(80, 100)),  # max_tokens
            make_batch(rng, 50, prompt=(2, 2), completion=(76, 76)),  # 3900 tokens, 30800 bytes
        ]
    if kind in ("limited", "queue"):
        cases += [make_batch(rng, 17)]  # the limiter's declared max_insert_batch
    if kind == "prioritized":  # (|A| + eps) ** 1 > MAX_MASS
        huge = make_batch(rng, 4)
        cases += [dataclasses.replace(huge, advantages=np.array([0.0, 0.0, 1e200, 0.0]))]
    for case in cases:
        with pytest.raises(ValueError, match=r"exceeds|priority"):
            table.insert(case, timeout=0)
    with pytest.raises(ValueError, match="pad_id"):
        table.sample(2, timeout=0, pad_id=2**40)
    with pytest.raises(ValueError, match="pad_id"):
        table.get([0], pad_id=True)
    with pytest.raises(ValueError, match="keys"):
        table.remove([[1, 2]])
    with pytest.raises(ValueError, match="version"):
        table.set_policy_version(-1)
    assert_same(before, snapshot(table))


def test_priorities_that_would_overflow_the_tree_are_refused() -> None:
    rng = np.random.default_rng(0)
    table = ReplayTable(16, sampler=Prioritized(alpha=1.0, beta=0.4))
    keys = table.insert(make_batch(rng, 8))
    before = snapshot(table)
    for bad in ([1e308] * 8, [np.nan] * 8, [-1.0] * 8, [1e101] * 8, ["x"] * 8):
        with pytest.raises(ValueError, match="priorit"):
            table.update_priorities(keys, bad)
        assert_same(before, snapshot(table))
    table.update_priorities(keys, [1e99] + [0.0] * 7)  # the extreme that is allowed ...
    sample = table.sample(64)  # ... still gives finite, positive probabilities and weights
    assert np.isfinite(sample.probabilities).all() and (sample.probabilities > 0).all()
    assert np.isfinite(sample.importance_weights).all()
    with pytest.raises(ValueError, match="epsilon"):
        Prioritized(alpha=50.0, epsilon=1e-6)


def test_max_bytes_bounds_the_payload_oldest_first() -> None:
    rng = np.random.default_rng(3)
    table = ReplayTable(1000, max_bytes=4000)
    inserted = [table.insert(make_batch(rng, 3, first_group=3 * i)) for i in range(40)]
    stats = table.stats()
    assert stats.payload_nbytes <= 4000 and stats.evictions["capacity_bytes"] > 0
    survivors = set(table.storage.keys_of(table.storage.live_slots()).tolist())
    order = np.concatenate(inserted).tolist()
    first = min(order.index(k) for k in survivors)
    assert set(order[first:]) == survivors, "byte eviction is oldest first"
    # an arena of <= 1.125 x max_bytes + the guard, beside the fixed per-slot columns
    assert table.storage.arena.nbytes < 1.2 * 4000 + 4 * 2048, "the arena stays bounded"
    loaded = ReplayTable.load(table.save(table_dir := _tmp(rng)))
    assert loaded.eviction.max_bytes == 4000 and table_dir.exists()


def _tmp(rng: np.random.Generator) -> Any:
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp()) / f"t{int(rng.integers(1 << 30))}"


def test_rollout_views_are_not_a_way_in() -> None:
    r = Rollout([1, 2], [3], [-0.5], 1.0, 0, 0)
    table = ReplayTable(4)
    table.insert(r)
    with pytest.raises(ValueError, match="read-only"):
        r.behaviour_logprobs[0] = 3.0
    with pytest.raises(InvalidRolloutError):
        Rollout([1, 2], [3], [0.5], 1.0, 0, 0)
