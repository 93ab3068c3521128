"""The row columns, declared once: every declared column is a field of each dataclass that carries
rows, and travels through every path a row takes (per-item views, select and concat, a table's
insert and draw, its checkpoint and its durable log) with its values intact; a batch that names
a column nobody declared is refused by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable, Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.columns import REQUIRED, ROW_COLUMNS, ROW_NAMES
from llm_replay.data.rollout import InvalidRolloutError, Rollout
from tests.conftest import make_batch


def distinct(batch: RolloutBatch, rng: np.random.Generator) -> RolloutBatch:
    """`batch` with a non-default value in every optional row column."""
    n = len(batch)
    return dataclasses.replace(
        batch,
        correct=rng.integers(-1, 2, n).astype(np.int8),
        finish_reasons=rng.integers(0, 3, n).astype(np.uint8),
        reward_versions=rng.integers(0, 9, n),
        reference_logprobs=np.where(rng.random(n) < 0.3, np.nan, -rng.exponential(size=n)),
        annotators=rng.integers(0, 4, n).astype(np.uint8),
        annotation_costs=rng.exponential(size=n),
    )


def same_rows(a: RolloutBatch | Sample, b: RolloutBatch | Sample) -> None:
    for name in ROW_NAMES:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_every_declared_column_is_a_field_of_each_row_carrier() -> None:
    for carrier in (RolloutBatch, Sample):
        names = {f.name for f in dataclasses.fields(carrier)}
        assert set(ROW_NAMES) <= names, carrier
    fields = {f.name for f in dataclasses.fields(Rollout)}
    assert {c.field for c in ROW_COLUMNS} <= fields
    assert [c.name for c in ROW_COLUMNS if c.default is REQUIRED] == [
        "rewards",
        "group_ids",
        "policy_versions",
    ]


def test_rows_survive_views_select_concat_and_a_tables_draw(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    batch = distinct(make_batch(rng, 12), rng)
    same_rows(RolloutBatch.from_rollouts(batch.rollouts()), batch)
    first = batch[0]
    assert first == dataclasses.replace(first) != dataclasses.replace(first, row_id=7)
    order = rng.permutation(12)
    same_rows(
        batch.select(order), RolloutBatch.concat([batch.select(order[:5]), batch.select(order[5:])])
    )
    table = ReplayTable(32, sampler=None, seed=1)
    keys = table.insert(batch)
    drawn, found = table.take(keys)
    assert found.all()
    same_rows(drawn, batch)
    same_rows(drawn.to_batch(), batch)
    same_rows(Sample.from_batch(batch, current_version=0), batch)
    table.save(tmp_path / "t")
    same_rows(ReplayTable.load(tmp_path / "t").get_batch(keys)[0], batch)
    durable = ReplayTable.open(tmp_path / "d", max_rollouts=32)
    durable_keys = durable.insert(batch)
    durable.close()
    reopened = ReplayTable.open(tmp_path / "d", max_rollouts=32)
    same_rows(reopened.get_batch(durable_keys)[0], batch)
    reopened.close()


def test_a_column_nobody_declared_is_refused_by_name() -> None:
    rng = np.random.default_rng(1)
    batch = make_batch(rng, 2)
    with pytest.raises(TypeError, match=r"unknown column\(s\) \['row_weights'\]"):
        RolloutBatch.from_ragged(
            prompt_ids=[r.prompt_ids for r in batch],
            completion_ids=[r.completion_ids for r in batch],
            behaviour_logprobs=[r.behaviour_logprobs for r in batch],
            rewards=batch.rewards,
            group_ids=batch.group_ids,
            policy_versions=batch.policy_versions,
            row_weights=[1.0, 2.0],
        )
    with pytest.raises(InvalidRolloutError, match=r"group_ids.*required"):
        RolloutBatch.from_ragged(
            prompt_ids=[[1]],
            completion_ids=[[2]],
            behaviour_logprobs=[[-0.1]],
            rewards=[1.0],
            policy_versions=[0],
        )
