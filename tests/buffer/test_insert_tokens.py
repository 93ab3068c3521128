"""Idempotent inserts (`ReplayTable.insert(token=...)`), `make_durable`, and `merge_stats`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.stats import merge_stats
from tests.buffer.test_durable import same_state
from tests.conftest import make_batch


def test_an_insert_sent_twice_with_its_token_lands_once(rng: np.random.Generator) -> None:
    table = ReplayTable(100, seed=1)
    batch = make_batch(rng, 8)
    keys = table.insert(batch, token=7)
    assert len(keys) == 8 and table.has_token(7) and not table.has_token(8)
    before = table.state()
    again = table.insert(batch, token=7)
    assert len(again) == 0 and table.size == 8 and table.stats().inserts == 8
    after = table.state()
    assert before[0] == after[0]  # counters, RNG, storage untouched
    table.insert(batch)  # no token: always inserted
    table.insert(batch, token=8)
    assert table.size == 24
    np.testing.assert_array_equal(table.insert_tokens(), [7, 8])


@pytest.mark.parametrize("token", [-1, 1.5, True, "3"])
def test_a_bad_token_is_refused_by_name_and_changes_nothing(
    rng: np.random.Generator, token: object
) -> None:
    table = ReplayTable(100, seed=1)
    with pytest.raises(ValueError, match="token = "):
        table.insert(make_batch(rng, 4), token=token)  # type: ignore[arg-type]
    assert table.size == 0 and table.stats().insert_calls == 0


def test_tokens_survive_a_checkpoint_and_a_crash_of_a_durable_table(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    table = ReplayTable(100, seed=1)
    for token in range(3):
        table.insert(make_batch(rng, 4, first_group=10 * token), token=token)
    table.save(tmp_path / "saved")
    loaded = ReplayTable.load(tmp_path / "saved")
    np.testing.assert_array_equal(loaded.insert_tokens(), [0, 1, 2])
    assert len(loaded.insert(make_batch(rng, 4), token=1)) == 0

    durable = ReplayTable.open(tmp_path / "log", max_rollouts=100, seed=1, fsync="never")
    durable.insert(make_batch(rng, 4), token=5)
    durable.insert(make_batch(rng, 4), token=9)
    # no close: reopened as after a SIGKILL
    reopened = ReplayTable.open(tmp_path / "log", max_rollouts=100, seed=1)
    np.testing.assert_array_equal(reopened.insert_tokens(), [5, 9])
    assert len(reopened.insert(make_batch(rng, 4), token=9)) == 0 and reopened.size == 8


def test_make_durable_recovers_or_replaces_what_the_directory_holds(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    first = ReplayTable(64, seed=2).make_durable(tmp_path / "d", fsync="never")
    twin = ReplayTable(64, seed=2)
    for step in range(5):
        batch = make_batch(rng, 6, first_group=10 * step)
        first.insert(batch, token=step)
        twin.insert(batch, token=step)
        first.sample(4)
        twin.sample(4)
    recovered = ReplayTable(64, seed=2).make_durable(tmp_path / "d")
    same_state(recovered, twin)
    with pytest.raises(ValueError, match="max_rollouts"):
        ReplayTable(32, seed=2).make_durable(tmp_path / "d")
    checkpoint = ReplayTable(64, seed=5)
    checkpoint.insert(make_batch(rng, 3), token=99)
    replaced = checkpoint.make_durable(tmp_path / "d", replace=True)
    assert replaced is checkpoint
    with pytest.raises(ValueError, match="durable already"):
        replaced.make_durable(tmp_path / "elsewhere")
    reopened = ReplayTable(64, seed=5).make_durable(tmp_path / "d")
    assert reopened.size == 3 and reopened.insert_tokens().tolist() == [99]


def test_merged_stats_add_counts_and_weight_the_sampled_age(rng: np.random.Generator) -> None:
    a, b = ReplayTable(10, max_tokens=10_000, seed=0), ReplayTable(30, seed=1)
    a.insert(make_batch(rng, 4))
    b.insert(make_batch(rng, 8))
    b.set_policy_version(2)
    a.sample(2)  # ages 0
    b.sample(6)  # ages 2
    b.insert(make_batch(rng, 30, version=2))  # evicts 8 by capacity
    merged = merge_stats([a.stats(), b.stats()], name="both")
    assert (merged.size, merged.max_rollouts, merged.inserts, merged.samples) == (34, 40, 42, 8)
    assert merged.max_tokens is None  # one shard has no token cap
    assert merged.sampled_age_mean == pytest.approx((2 * 0 + 6 * 2) / 8)
    assert merged.sampled_age_max == 2 and merged.policy_version == 2
    assert merged.evictions["capacity_rollouts"] == 8
    assert sum(merged.age_histogram) == 34 and sum(merged.reuse_histogram) == 34
    with pytest.raises(ValueError, match="no shards"):
        merge_stats([], name="none")
