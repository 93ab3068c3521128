"""The preference columns (reference log-probs, annotator, annotation cost): carried by batches and
rollouts, stored, sampled, saved, logged, refused by name when bad, and filled with their
defaults where a table or log record was written before they existed."""

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
from llm_replay.data.rollout import ANNOTATORS, InvalidRolloutError
from tests.conftest import make_batch

REFERENCE = [-1.5, -2.0, -0.25, -3.0]
CODES = [1, 1, 2, 3]
COSTS = [0.5, 0.5, 1.0, 0.0]


def annotated(rng: np.random.Generator) -> RolloutBatch:
    return dataclasses.replace(
        make_batch(rng, 4),
        reference_logprobs=np.array(REFERENCE),
        annotators=np.array(CODES, dtype=np.uint8),
        annotation_costs=np.array(COSTS),
    )


def columns(batch: RolloutBatch) -> tuple[list[float], list[int], list[float]]:
    return (
        batch.reference_logprobs.tolist(),
        batch.annotators.tolist(),
        batch.annotation_costs.tolist(),
    )


def test_batches_and_rollouts_carry_the_pair_columns() -> None:
    rng = np.random.default_rng(0)
    batch = annotated(rng)
    assert columns(batch) == (REFERENCE, CODES, COSTS)
    assert [r.annotator for r in batch] == [ANNOTATORS[c] for c in CODES]
    assert columns(RolloutBatch.from_rollouts(batch.rollouts())) == (REFERENCE, CODES, COSTS)
    assert columns(batch.select([2, 0])) == ([-0.25, -1.5], [2, 1], [1.0, 0.5])
    plain = make_batch(rng, 2)  # not in a pair: no reference taken, no annotator, no cost
    assert np.isnan(plain.reference_logprobs).all() and plain[0].reference_logprob is None
    both = RolloutBatch.concat([batch, plain])
    assert both.annotators.tolist() == [*CODES, 0, 0]
    assert batch[0] != dataclasses.replace(batch, annotators=np.zeros(4, np.uint8))[0]


def test_bad_pair_columns_name_the_field_and_the_rollout() -> None:
    rng = np.random.default_rng(1)
    batch = make_batch(rng, 3)
    with pytest.raises(InvalidRolloutError, match=r"rollouts\[2\]\.annotator"):
        dataclasses.replace(batch, annotators=np.array([0, 1, len(ANNOTATORS)]))
    with pytest.raises(InvalidRolloutError, match=r"rollouts\[0\]\.annotation_cost"):
        dataclasses.replace(batch, annotation_costs=np.array([-1.0, 0.0, 0.0]))
    with pytest.raises(InvalidRolloutError, match=r"rollouts\[1\]\.reference_logprob"):
        dataclasses.replace(batch, reference_logprobs=np.array([0.0, np.inf, 0.0]))
    with pytest.raises(InvalidRolloutError, match="annotator"):
        dataclasses.replace(batch[0], annotator="a person")


def test_the_table_stores_samples_and_saves_the_pair_columns(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    table = ReplayTable(16, seed=0)
    keys = table.insert(annotated(rng))
    assert columns(table.get_batch(keys)[0]) == (REFERENCE, CODES, COSTS)
    sample, _ = table.take(keys[::-1])
    assert sample.reference_logprobs.tolist() == REFERENCE[::-1]
    assert sample.annotators.tolist() == CODES[::-1]
    assert columns(sample.to_batch()) == (REFERENCE[::-1], CODES[::-1], COSTS[::-1])
    loaded = ReplayTable.load(table.save(tmp_path / "t"))
    assert columns(loaded.get_batch(keys)[0]) == (REFERENCE, CODES, COSTS)
    durable = ReplayTable.open(tmp_path / "d", max_rollouts=16)
    keys = durable.insert(annotated(rng))
    reopened = ReplayTable.open(tmp_path / "d", max_rollouts=16)  # no close: replays the log
    assert columns(reopened.get_batch(keys)[0]) == (REFERENCE, CODES, COSTS)


def test_tables_and_records_written_before_the_columns_load_with_defaults() -> None:
    legacy = ReplayTable.load(Path(__file__).parent / "data" / "positive_biased_v1")
    batch = legacy.get_batch(legacy.storage.keys_of(legacy.storage.live_slots()))[0]
    assert np.isnan(batch.reference_logprobs).all()
    assert not batch.annotators.any() and not batch.annotation_costs.any()
    record = encode_record(7, "insert", {"batch": annotated(np.random.default_rng(3))})
    head_len, data_len = struct.unpack_from("<4sQIQII", record)[2:4]
    header = json.loads(record[HEAD.size : HEAD.size + head_len])
    data = record[HEAD.size + head_len : HEAD.size + head_len + data_len]
    assert columns(decode_fields(copy.deepcopy(header), data)["batch"]) == (REFERENCE, CODES, COSTS)
    new = {"batch.reference_logprobs", "batch.annotators", "batch.annotation_costs"}
    header["arrays"] = [a for a in header["arrays"] if a[0] not in new]
    old = decode_fields(header, data)["batch"]
    assert np.isnan(old.reference_logprobs).all() and old.annotators.tolist() == [0] * 4
