"""The `Pairs` sampler: whole pairs out of a plain `ReplayTable`, its weights (seeded statistical
checks), its index under inserts, age eviction and removal (property-based), and checkpoints."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_replay.buffer import Pairs, ReplayTable
from llm_replay.data.batch import RolloutBatch
from tests.conftest import make_batch


def pairs(rng: np.random.Generator, n: int, *, version: int = 0, first: int = 0) -> RolloutBatch:
    batch = make_batch(rng, 2 * n, version=version, first_group=first, group_size=2)
    return dataclasses.replace(
        batch,
        rewards=np.tile([1.0, 0.0], n),
        annotators=np.ones(2 * n, dtype=np.uint8),
    )


def whole_pairs(table: ReplayTable, keys: np.ndarray) -> bool:
    rows = table.get_batch(keys)[0]
    return bool(
        (rows.group_ids[0::2] == rows.group_ids[1::2]).all()
        and (rows.rewards[0::2] == 1).all()
        and (rows.rewards[1::2] == 0).all()
    )


def test_a_batch_is_whole_pairs_without_repeats_and_their_probabilities() -> None:
    rng = np.random.default_rng(0)
    table = ReplayTable(40, sampler=Pairs("uniform"), seed=3)
    table.insert(pairs(rng, 10))
    sample = table.sample(8)
    assert len(sample) == 8 and whole_pairs(table, sample.keys)
    assert len(set(sample.keys.tolist())) == 8
    assert sample.probabilities.tolist() == pytest.approx([0.1] * 8)
    assert table.sampler.available() == 20


@pytest.mark.parametrize(
    ("weighting", "expected"),
    [("recency", [1 / 7, 2 / 7, 4 / 7]), ("margin", [0.1, 0.3, 0.6])],
)
def test_the_weights_draw_as_documented(weighting: str, expected: list[float]) -> None:
    rng = np.random.default_rng(1)
    sampler = Pairs(weighting, half_life=1.0)
    table = ReplayTable(12, sampler=sampler, seed=4)
    for version in range(3):
        table.insert(pairs(rng, 1, version=version, first=version))
    if weighting == "margin":
        table.update_priorities(table.storage.keys_of(sampler.chosen), [0.1, 0.3, 0.6])
    counts = np.zeros(3)
    position = {int(s): i for i, s in enumerate(sampler.chosen)}
    for _ in range(3000):
        counts[position[int(table.storage.slots_of(table.sample(2).keys[:1])[0][0])]] += 1
    assert (counts / counts.sum()).tolist() == pytest.approx(expected, abs=0.03)


def test_held_pairs_are_not_drawn_and_removal_takes_a_pair_out_of_the_index() -> None:
    rng = np.random.default_rng(2)
    sampler = Pairs()
    table = ReplayTable(12, sampler=sampler, seed=5)
    keys = table.insert(pairs(rng, 3))
    sampler.leave_out(sampler.chosen[:2])
    assert sampler.available() == 2
    assert table.sample(2).keys.tolist() == keys[4:].tolist()
    sampler.leave_out(np.zeros(0, dtype=np.int64))
    table.remove(keys[1:2])  # one row alone: its pair leaves the index, its partner stays stored
    assert len(sampler) == 2 and len(table) == 5
    assert not np.isin(sampler.chosen, table.storage.slots_of(keys[:1])[0]).any()


def test_refusals_name_the_field() -> None:
    with pytest.raises(ValueError, match="weighting = 'best'"):
        Pairs("best")
    with pytest.raises(ValueError, match="half_life = 0"):
        Pairs("recency", half_life=0)
    with pytest.raises(ValueError, match="exponent = -1"):
        Pairs("margin", exponent=-1)
    table = ReplayTable(8, sampler=Pairs("margin"))
    keys = table.insert(pairs(np.random.default_rng(3), 1))
    with pytest.raises(ValueError, match=r"priorities\[0\] = nan"):
        table.update_priorities(keys[:1], [float("nan")])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 2), st.integers(0, 3), st.integers(0, 6)),
        min_size=1,
        max_size=12,
    )
)
def test_the_index_holds_exactly_the_live_pairs(steps: list[tuple[int, int, int, int]]) -> None:
    rng = np.random.default_rng(4)
    sampler = Pairs("recency", half_life=2.0)
    table = ReplayTable(16, sampler=sampler, max_age=3, seed=6)
    version, group = 0, 0
    for n, advance, remove, draw in steps:
        if len(table) + 2 * n > 16:  # the oldest pairs leave first, as `PairReplay` drops them
            both = np.concatenate([sampler.chosen[:n], sampler.rejected[:n]])
            table.remove(table.storage.keys_of(both))
        table.insert(pairs(rng, n, version=version, first=group))
        group += n
        version += advance
        table.set_policy_version(version)
        for _ in range(remove % 2):
            if len(sampler):
                index = np.arange(len(sampler))[:1]
                both = np.concatenate([sampler.chosen[index], sampler.rejected[index]])
                table.remove(table.storage.keys_of(both))
        assert len(table) == 2 * len(sampler)
        live = np.sort(table.storage.live_slots())
        assert np.array_equal(np.sort(np.concatenate([sampler.chosen, sampler.rejected])), live)
        if draw and len(sampler):
            sample = table.sample(2 * min(draw, len(sampler)))
            assert whole_pairs(table, sample.keys)
            assert len(set(sample.keys.tolist())) == len(sample)


def test_a_saved_table_draws_as_the_original_and_a_crafted_index_is_refused(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(5)
    table = ReplayTable(24, sampler=Pairs("margin", exponent=2.0), max_age=4, seed=7)
    for version in range(6):
        table.insert(pairs(rng, 2, version=version, first=2 * version))
        table.set_policy_version(version)
        sample = table.sample(2)
        table.update_priorities(sample.keys[:1], rng.uniform(size=1))
    table.save(tmp_path / "t")
    loaded = ReplayTable.load(tmp_path / "t")
    assert isinstance(loaded.sampler, Pairs)
    assert loaded.sampler.wrongness.tolist() == table.sampler.wrongness.tolist()
    for _ in range(5):
        assert table.sample(4).keys.tolist() == loaded.sample(4).keys.tolist()
    crafted = dict(loaded.sampler.state_arrays())
    crafted["rejected"] = crafted["chosen"]
    with pytest.raises(ValueError, match="each once"):
        loaded.sampler.load_state_arrays(crafted)
    with pytest.raises(ValueError, match="arrays differ"):
        loaded.sampler.load_state_arrays(crafted | {"wrongness": np.zeros(1)})
