"""The pair table: whole pairs in and out, oldest pairs leave first, age and stale-judge eviction,
the draw rules (seeded statistical checks), a step's fresh pairs left out, and a saved index that
draws as the original."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import ANNOTATORS
from llm_replay.preference.replay import PairReplay
from tests.conftest import make_batch


def pairs(rng: np.random.Generator, n: int, *, version: int = 0, first: int = 0) -> RolloutBatch:
    batch = make_batch(rng, 2 * n, version=version, first_group=first, group_size=2)
    return dataclasses.replace(
        batch,
        rewards=np.tile([1.0, 0.0], n),
        advantages=np.tile([1.0, -1.0], n),
        reference_logprobs=-rng.exponential(size=2 * n),
        annotators=np.ones(2 * n, dtype=np.uint8),
    )


def replay(mode: str = "uniform", **kw: object) -> PairReplay:
    settings = {"capacity": 8, "max_age": None, "recency_half_life": 2.0, "priority_exponent": 1.0}
    return PairReplay(mode=mode, seed=0, **(settings | kw))  # type: ignore[arg-type]


def test_pairs_come_back_whole_and_in_order() -> None:
    rng = np.random.default_rng(0)
    table = replay()
    keys = table.insert(pairs(rng, 4))
    sample = table.draw(3)
    assert sample is not None and len(sample) == 6
    assert (sample.rewards[0::2] == 1).all() and (sample.rewards[1::2] == 0).all()
    assert (sample.group_ids[0::2] == sample.group_ids[1::2]).all()
    assert set(sample.keys.tolist()) <= set(keys.tolist())
    excluded = table.draw(8, exclude=keys[0::2][:3])
    assert excluded is not None and len(excluded) == 2  # only the fourth pair was left
    assert table.draw(8) is not None and len(table.draw(8)) == 8  # the left-out come back
    assert replay("none").draw(4) is None
    with pytest.raises(ValueError, match="whole pairs"):
        table.insert(make_batch(rng, 3))
    with pytest.raises(ValueError, match="row 0 has no annotator"):
        table.insert(make_batch(rng, 2))
    split = pairs(rng, 2, first=20)
    split = dataclasses.replace(split, policy_versions=np.array([0, 0, 0, 1]))
    with pytest.raises(ValueError, match=r"pairs\[1\]\.policy_versions"):
        table.insert(split)
    assert len(table) == 4  # nothing of a refused insert was kept


def test_the_oldest_pairs_leave_first_and_age_evicts_whole_pairs() -> None:
    rng = np.random.default_rng(1)
    table = replay(max_age=3)
    old = table.insert(pairs(rng, 6, version=0))
    new = table.insert(pairs(rng, 4, version=2, first=10))
    assert len(table) == 8 and table.evicted == 2
    assert not table.table.contains(old[:4]).any() and table.table.contains(old[4:]).all()
    table.set_version(4)  # the version-0 pairs are now 4 > 3 versions old
    assert len(table) == 4 and table.table.contains(new).all() and len(table.table) == 8
    assert table.metrics(4)["preference/stored_age"] == 2.0


def judged(batch: RolloutBatch, annotator: str, version: int) -> RolloutBatch:
    return dataclasses.replace(
        batch,
        annotators=np.full(len(batch), ANNOTATORS.index(annotator), dtype=np.uint8),
        reward_versions=np.full(len(batch), version, dtype=np.int64),
    )


def test_pairs_an_older_judge_made_can_be_dropped_and_a_files_pairs_stay() -> None:
    rng = np.random.default_rng(2)
    table = replay()
    table.insert(judged(pairs(rng, 2), "reward_model", 0))
    table.insert(judged(pairs(rng, 1, first=3), "file", 0))
    table.insert(judged(pairs(rng, 2, first=5), "reward_model", 1))
    assert table.remove_scored_before(1) == 2 and len(table) == 3
    left = table.table.get_batch(table.chosen)[0]
    assert sorted(left.annotators.tolist()) == [2, 2, 3]


def draw_counts(table: PairReplay, version: int, draws: int = 4000) -> np.ndarray:
    counts = np.zeros(len(table))
    position = {int(k): i for i, k in enumerate(table.chosen)}
    for _ in range(draws):
        sample = table.draw(1)
        assert sample is not None
        counts[position[int(sample.keys[0])]] += 1
    return counts / draws


def test_recency_and_margin_weight_the_draws_as_documented() -> None:
    rng = np.random.default_rng(3)
    recency = replay("recency", max_age=None)
    recency.insert(pairs(rng, 1, version=0))
    recency.insert(pairs(rng, 1, version=2, first=5))
    shares = draw_counts(recency, version=2)  # weights 0.5 and 1: shares 1/3 and 2/3
    assert shares[1] == pytest.approx(2 / 3, abs=0.03)
    margin = replay("margin")
    margin.insert(pairs(rng, 3))
    margin.update(margin.chosen, np.array([0.1, 0.3, 0.6]))
    assert draw_counts(margin, version=0).tolist() == pytest.approx([0.1, 0.3, 0.6], abs=0.03)
    assert margin.stale_signal() == pytest.approx(1 / 3)
    assert np.isnan(replay().stale_signal())


def test_a_saved_pair_table_draws_as_the_original(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    table = replay("margin")
    table.insert(pairs(rng, 6))
    table.update(table.chosen[:3], np.array([0.9, 0.2, 0.4]))
    table.draw(2)
    table.save(tmp_path / "pairs")
    loaded = replay("margin")
    loaded.load(tmp_path / "pairs")
    assert loaded.wrongness.tolist() == table.wrongness.tolist()
    for _ in range(5):
        a, b = table.draw(3), loaded.draw(3)
        assert a is not None and b is not None
        assert a.keys.tolist() == b.keys.tolist()
        assert a.times_sampled.tolist() == b.times_sampled.tolist()
    plain = ReplayTable(8)
    plain.save(tmp_path / "plain" / "pair_table")
    (tmp_path / "plain" / "pair_replay.json").write_text('{"evicted": 0, "mode": "margin"}')
    with pytest.raises(ValueError, match="not a pair index"):
        replay("margin").load(tmp_path / "plain")
