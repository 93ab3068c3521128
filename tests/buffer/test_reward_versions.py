"""The reward-model version column: carried by batches, stored, sampled, saved, logged, and
filled with 0 where a table or log record was written before it existed."""

from __future__ import annotations

import copy
import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.log_records import HEAD, decode_fields, encode_record
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import InvalidRolloutError, Rollout
from tests.conftest import make_batch


def versioned(rng: np.random.Generator, n: int, versions: list[int], **kw: int) -> RolloutBatch:
    batch = make_batch(rng, n, **kw)
    return dataclasses.replace(batch, reward_versions=np.asarray(versions, dtype=np.int64))


def test_batches_and_rollouts_carry_the_reward_version() -> None:
    rng = np.random.default_rng(0)
    batch = versioned(rng, 4, [3, 3, 5, 7])
    assert batch.reward_versions.dtype == np.int64 and not batch.reward_versions.flags.writeable
    assert [r.reward_version for r in batch] == [3, 3, 5, 7]
    assert RolloutBatch.from_rollouts(batch.rollouts()).reward_versions.tolist() == [3, 3, 5, 7]
    assert batch.select([3, 0]).reward_versions.tolist() == [7, 3]
    both = RolloutBatch.concat([batch, make_batch(rng, 2)])
    assert both.reward_versions.tolist() == [3, 3, 5, 7, 0, 0]  # not given: version 0
    assert batch[0] != dataclasses.replace(batch, reward_versions=np.zeros(4, np.int64))[0]


def test_a_bad_reward_version_names_the_field_and_the_rollout() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidRolloutError, match=r"rollouts\[1\]\.reward_version"):
        versioned(rng, 3, [0, -2, 1])
    with pytest.raises(InvalidRolloutError, match="reward_versions"):
        versioned(rng, 3, [0, 1])
    good = make_batch(rng, 1)[0]
    with pytest.raises(InvalidRolloutError, match="reward_version"):
        dataclasses.replace(good, reward_version=-1)
    assert isinstance(good, Rollout) and good.reward_version == 0


def test_the_table_stores_samples_and_saves_the_versions(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    table = ReplayTable(64, seed=0)
    keys = table.insert(versioned(rng, 8, [1] * 4 + [2] * 4))
    assert table.get_batch(keys)[0].reward_versions.tolist() == [1] * 4 + [2] * 4
    sample = table.sample(16)
    by_key = dict(zip(keys.tolist(), [1] * 4 + [2] * 4, strict=True))
    assert sample.reward_versions.tolist() == [by_key[k] for k in sample.keys.tolist()]
    assert sample.to_batch().reward_versions.tolist() == sample.reward_versions.tolist()
    loaded = ReplayTable.load(table.save(tmp_path / "t"))
    assert loaded.get_batch(keys)[0].reward_versions.tolist() == [1] * 4 + [2] * 4


def test_set_scores_moves_versions_and_a_reopened_durable_table_replays_it(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(2)
    table = ReplayTable.open(tmp_path / "d", max_rollouts=64)
    keys = table.insert(versioned(rng, 8, [1] * 8))
    chosen = keys[[1, 5]]
    table.set_scores(chosen, [0.5, 0.25], [0.1, -0.1], [0, 0], reward_versions=[4, 4])
    with pytest.raises(ValueError, match="reward_versions"):
        table.set_scores(chosen, [0.5, 0.25], [0.1, -0.1], [0, 0], reward_versions=[-1, 4])
    with pytest.raises(ValueError, match="reward_versions"):
        table.set_scores(chosen, [0.5, 0.25], [0.1, -0.1], [0, 0], reward_versions=[1.5, 4])
    table.set_scores(keys[:1], [1.0], [0.3], [1])  # versions untouched
    expected = [1, 4, 1, 1, 1, 4, 1, 1]
    assert table.get_batch(keys)[0].reward_versions.tolist() == expected
    reopened = ReplayTable.open(tmp_path / "d", max_rollouts=64)  # no close: replays the log
    assert reopened.get_batch(keys)[0].reward_versions.tolist() == expected
    assert reopened.get_batch(keys)[0].rewards[[1, 5]].tolist() == [0.5, 0.25]


def test_a_table_saved_before_the_column_loads_with_version_zero() -> None:
    legacy = ReplayTable.load(Path(__file__).parent / "data" / "positive_biased_v1")
    keys = legacy.storage.keys_of(legacy.storage.live_slots())
    assert legacy.get_batch(keys)[0].reward_versions.tolist() == [0] * len(keys)


def test_a_log_record_written_before_the_column_decodes_with_version_zero() -> None:
    rng = np.random.default_rng(3)
    record = encode_record(7, "insert", {"batch": versioned(rng, 3, [2, 2, 2])})
    head_len, data_len = struct.unpack_from("<4sQIQII", record)[2:4]
    header = json.loads(record[HEAD.size : HEAD.size + head_len])
    data = record[HEAD.size + head_len : HEAD.size + head_len + data_len]
    assert decode_fields(copy.deepcopy(header), data)["batch"].reward_versions.tolist() == [2] * 3
    header["arrays"] = [a for a in header["arrays"] if a[0] != "batch.reward_versions"]
    assert decode_fields(header, data)["batch"].reward_versions.tolist() == [0, 0, 0]
