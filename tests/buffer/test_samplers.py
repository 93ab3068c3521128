"""Seeded statistical tests: each sampler draws from the distribution it promises."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_replay.buffer import (
    Fifo,
    Groups,
    PositiveRetention,
    Prioritized,
    Recency,
    ReplayTable,
    Uniform,
    make_sampler,
)
from llm_replay.buffer.sum_tree import SumTree
from llm_replay.data.batch import RolloutBatch
from tests.conftest import make_batch

DRAWS = 120_000


def chi2_sf(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square distribution (Wilson-Hilferty normal approximation)."""
    z = ((statistic / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def frequencies(table: ReplayTable, keys: np.ndarray, batch: int = 1000) -> np.ndarray:
    index = {k: i for i, k in enumerate(keys.tolist())}
    counts = np.zeros(len(keys))
    for _ in range(DRAWS // batch):
        for k in table.sample(batch).keys.tolist():
            counts[index[k]] += 1
    return counts


def assert_matches(counts: np.ndarray, expected_p: np.ndarray) -> None:
    expected = expected_p / expected_p.sum() * counts.sum()
    statistic = float(((counts - expected) ** 2 / expected).sum())
    p_value = chi2_sf(statistic, len(counts) - 1)
    assert p_value > 1e-3, f"chi2 = {statistic:.1f} over {len(counts) - 1} dof, p = {p_value:.2g}"


def test_chi2_helper_rejects_a_wrong_distribution() -> None:
    counts = np.array([1200.0, 1000, 800])
    assert chi2_sf(float(((counts - 1000) ** 2 / 1000).sum()), 2) < 1e-3
    assert chi2_sf(2.0, 2) > 0.2


def filled(
    sampler: object, n: int = 48, seed: int = 7, **kwargs: object
) -> tuple[ReplayTable, np.ndarray]:
    table = ReplayTable(n, sampler=sampler, seed=seed, **kwargs)  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    keys = np.concatenate(
        [table.insert(make_batch(rng, 8, first_group=8 * i, version=i)) for i in range(n // 8)]
    )
    return table, keys


@pytest.mark.parametrize("replacement", [True, False])
def test_uniform_frequencies(replacement: bool) -> None:
    table, keys = filled(Uniform(replacement=replacement))
    counts = frequencies(table, keys, batch=40)
    assert_matches(counts, np.ones(len(keys)))


def test_uniform_without_replacement_has_no_repeats_in_a_batch() -> None:
    table, _ = filled(Uniform(replacement=False))
    for _ in range(50):
        keys = table.sample(48).keys
        assert len(set(keys.tolist())) == 48


def test_prioritized_frequencies_and_weights() -> None:
    sampler = Prioritized(alpha=0.6, beta=0.5, epsilon=0.01)
    table, keys = filled(sampler)
    adv = table.storage.advantage[table.storage.slots_of(keys)[0]]
    mass = (np.abs(adv) + 0.01) ** 0.6
    counts = frequencies(table, keys)
    assert_matches(counts, mass)
    s = table.sample(64)
    expected_p = (np.abs(s.advantages) + 0.01) ** 0.6 / mass.sum()
    np.testing.assert_allclose(s.probabilities, expected_p, rtol=1e-12)
    n = len(keys)
    w = (n * expected_p) ** -0.5 / ((n * mass.min() / mass.sum()) ** -0.5)
    np.testing.assert_allclose(s.importance_weights, w, rtol=1e-12)
    assert s.importance_weights.max() <= 1.0


def test_prioritized_follows_updated_priorities() -> None:
    table, keys = filled(Prioritized(alpha=1.0, beta=0.0, epsilon=1e-9))
    new = np.linspace(0.1, 5.0, len(keys))
    assert table.update_priorities(keys, new) == len(keys)
    assert_matches(frequencies(table, keys), new)
    with pytest.raises(ValueError, match="priorities"):
        table.update_priorities(keys[:2], [1.0, -1.0])
    with pytest.raises(TypeError, match="no priorities"):
        filled(Uniform())[0].update_priorities(keys[:1], [1.0])


def test_freshper_priorities_decay_with_age() -> None:
    """(|A| + ε)^α · exp(−age/τ): exact probabilities, frequencies, and the same after a rebase."""
    sampler = Prioritized(alpha=0.5, beta=0.4, epsilon=0.01, decay_steps=2.0)
    table, keys = filled(sampler)
    table.set_policy_version(6)
    slots = table.storage.slots_of(keys)[0]
    adv = table.storage.advantage[slots]
    age = 6 - table.storage.policy_version[slots]
    mass = (np.abs(adv) + 0.01) ** 0.5 * np.exp(-age / 2.0)
    assert_matches(frequencies(table, keys), mass)
    s = table.sample(32)
    s_age = 6 - s.policy_versions
    expected = (np.abs(s.advantages) + 0.01) ** 0.5 * np.exp(-s_age / 2.0) / mass.sum()
    np.testing.assert_allclose(s.probabilities, expected, rtol=1e-9)
    # a rollout born far later forces a rebase of every stored mass; ratios must not move
    sampler.REBASE_AT = 2.0
    late = make_batch(np.random.default_rng(1), 8, first_group=900, version=20)
    table.insert(late)
    assert sampler.reference == 20
    ratio = sampler.tree.get(slots[-9:]) / sampler.tree.get(slots[-9:]).sum()  # versions 4, 5
    np.testing.assert_allclose(ratio, mass[-9:] / mass[-9:].sum(), rtol=1e-9)
    with pytest.raises(ValueError, match="decay_steps"):
        Prioritized(decay_steps=0.0)


def test_freshper_table_checkpoint_keeps_the_decay(tmp_path: object) -> None:
    table, _ = filled(Prioritized(decay_steps=3.0))
    table.set_policy_version(4)
    path = table.save(tmp_path / "t")  # type: ignore[operator]
    loaded = ReplayTable.load(path)
    assert loaded.sampler.config()["decay_steps"] == 3.0
    a, b = table.sample(16), loaded.sample(16)
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_allclose(a.probabilities, b.probabilities)


def test_recency_weights_halve_per_half_life() -> None:
    table, keys = filled(Recency(half_life=2.0))
    table.set_policy_version(5)
    versions = table.storage.policy_version[table.storage.slots_of(keys)[0]]
    assert_matches(frequencies(table, keys), 2.0 ** (-(5 - versions) / 2.0))


def test_fifo_is_oldest_first_and_queue_uses_each_once(rng: np.random.Generator) -> None:
    table = ReplayTable.queue(100)
    keys = np.concatenate([table.insert(make_batch(rng, 10, first_group=10 * i)) for i in range(5)])
    drawn = np.concatenate([table.sample(10).keys for _ in range(5)])
    assert np.array_equal(drawn, keys)
    assert table.size == 0
    assert table.stats().evictions["max_times_sampled"] == 50
    with pytest.raises(Exception, match="timed out"):
        table.sample(1, timeout=0.01)


def test_head_rows_is_the_oldest_items_rows_whatever_its_size(rng: np.random.Generator) -> None:
    """An intake queue of work items of 4 groups each (block = 4 consecutive group ids), the
    items of 6, 16 and 8 rows: the head is one item's rows, then the next one's."""
    table = ReplayTable.queue(64, max_insert_batch=32, max_sample_batch=32)
    assert table.head_rows(4) == 0
    for item, (rows, size) in enumerate([(6, 2), (16, 4), (8, 2)]):
        batch = make_batch(rng, rows, first_group=4 * item, group_size=size)
        assert set(batch.group_ids // 4) == {item}
        table.insert(batch)
    for item, rows in enumerate([6, 16, 8]):
        n = table.head_rows(4)
        assert n == rows
        drawn = table.sample_batch(n)
        assert set((drawn.group_ids // 4).tolist()) == {item}
    assert table.head_rows(4) == 0
    with pytest.raises(ValueError, match="groups_per_block = 0"):
        table.head_rows(0)
    with pytest.raises(ValueError, match="'uniform' sampler has no fixed head"):
        ReplayTable.uniform(8).head_rows(4)


def test_an_intake_queue_bounded_in_items_holds_no_more_whatever_their_size(
    rng: np.random.Generator,
) -> None:
    """Rows alone (64) would admit four items of 8 rows; a bound of 2 items (blocks of 4 group
    ids) admits two until the learner takes the head item whole, then one more."""
    items = [make_batch(rng, 8, first_group=4 * i, group_size=2) for i in range(4)]
    by_rows = ReplayTable.queue(64, max_insert_batch=32, max_sample_batch=32)
    for batch in items:
        assert by_rows.wait_for_insert(len(batch), timeout=0)
        by_rows.insert(batch)
    table = ReplayTable.queue(
        64, max_insert_batch=32, max_sample_batch=32, max_items=2, groups_per_item=4
    )
    table.insert(items[0])
    table.insert(items[1])
    assert not table.wait_for_insert(8, timeout=0)
    with pytest.raises(Exception, match="timed out"):
        table.insert(items[2], timeout=0.01)
    assert table.size == 16  # the refused insert changed nothing
    drawn = table.sample_batch(table.head_rows(4))
    assert set((drawn.group_ids // 4).tolist()) == {0}
    assert table.wait_for_insert(8, timeout=0)
    table.insert(items[2])
    assert table.size == 16 and not table.wait_for_insert(8, timeout=0)
    state = table.state()
    again = ReplayTable.from_state(*state)  # a resumed run keeps the bound
    assert (again.max_items, again.groups_per_item) == (2, 4)
    assert not again.wait_for_insert(8, timeout=0)
    meta, arrays = state
    old = {k: v for k, v in meta.items() if k not in ("max_items", "groups_per_item")}
    assert ReplayTable.from_state(old, arrays).max_items is None  # saved before the bound


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_items": 2}, "give both or neither"),
        ({"groups_per_item": 4}, "give both or neither"),
        ({"max_items": 0, "groups_per_item": 4}, "max_items = 0: must be >= 1"),
        ({"max_items": 2, "groups_per_item": True}, "groups_per_item = True: expected an int"),
    ],
)
def test_an_item_bound_names_its_bad_setting(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        ReplayTable.queue(64, **kwargs)  # type: ignore[arg-type]


def test_positive_biased_keeps_the_delta_split() -> None:
    n, delta = 200, 0.5
    table = ReplayTable.positive_biased(n, delta=delta, seed=3)
    rng = np.random.default_rng(3)
    all_keys, correct = [], []
    for i in range(60):
        batch = make_batch(rng, 20, first_group=20 * i, correct_rate=0.3)
        all_keys.append(table.insert(batch))
        correct.append(batch.correct == 1)
    keys, flags = np.concatenate(all_keys), np.concatenate(correct)
    live = set(table.storage.keys_of(table.storage.live_slots()).tolist())
    fresh = int((1 - delta) * n)
    assert set(keys[-fresh:].tolist()) <= live, "the freshest (1-δ)N are all kept"
    older = keys[:-fresh]
    kept_old = [k for k in older.tolist() if k in live]
    assert len(kept_old) == n - fresh, "δN older rollouts are kept"
    assert kept_old == older[flags[:-fresh]][-(n - fresh) :].tolist(), "the freshest correct ones"
    assert table.size == n
    live_keys = np.sort(np.fromiter(live, dtype=np.int64))
    assert_matches(frequencies(table, live_keys), np.ones(len(live_keys)))


def test_groups_returns_whole_groups(rng: np.random.Generator) -> None:
    table = ReplayTable(64, sampler=Groups(), seed=1)
    table.insert(make_batch(rng, 64, group_size=8))
    for _ in range(20):
        s = table.sample(24)
        assert len(s) == 24
        _, counts = np.unique(s.group_ids, return_counts=True)
        assert (counts == 8).all()


def test_sum_tree_never_draws_empty_leaves() -> None:
    tree = SumTree(1000)
    leaves = np.arange(0, 1000, 7)
    tree.set(leaves, np.linspace(1e-12, 1e6, len(leaves)))
    rng = np.random.default_rng(0)
    drawn = tree.sample(50_000, rng)
    assert set(drawn.tolist()) <= set(leaves.tolist())
    tree.set(leaves[:-1], 0.0)
    assert set(tree.sample(1000, rng).tolist()) == {int(leaves[-1])}
    assert tree.min == pytest.approx(1e6)


def test_make_sampler_validates() -> None:
    assert isinstance(make_sampler("fifo"), Fifo)
    with pytest.raises(ValueError, match="sampler = 'nope'"):
        make_sampler("nope")
    with pytest.raises(ValueError, match="alpha"):
        Prioritized(alpha=-1)
    with pytest.raises(ValueError, match="delta"):
        PositiveRetention(delta=1.5)
    with pytest.raises(ValueError, match="half_life"):
        Recency(half_life=0)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(2, 40),
    delta=st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.7, 1.0]),
    inserts=st.lists(st.lists(st.booleans(), min_size=1, max_size=40), min_size=1, max_size=12),
)
def test_positive_biased_keeps_exactly_its_windows_whatever_the_insert_width(
    capacity: int, delta: float, inserts: list[list[bool]]
) -> None:
    """Freshest (1-δ)N of everything inserted, plus the freshest δN correct among the rest."""
    table = ReplayTable(capacity, remover=PositiveRetention(delta=delta))
    rng = np.random.default_rng(0)
    flags: list[bool] = []
    index_of: dict[int, int] = {}
    for width_flags in inserts:
        chosen = width_flags[:capacity]
        base = make_batch(rng, len(chosen), first_group=len(flags))
        batch = RolloutBatch.from_rollouts(
            [dataclasses.replace(r, correct=c) for r, c in zip(base, chosen, strict=True)]
        )
        for offset, key in enumerate(table.insert(batch).tolist()):
            if key >= 0:
                index_of[key] = len(flags) + offset
        flags.extend(chosen)
    kept_n = round(delta * capacity)
    total = len(flags)
    fresh = set(range(max(0, total - (capacity - kept_n)), total))
    older_correct = [i for i in range(total) if flags[i] and i not in fresh]
    expected = fresh | set(older_correct[max(0, len(older_correct) - kept_n) :] if kept_n else [])
    live = table.storage.keys_of(table.storage.live_slots()).tolist()
    assert {index_of[k] for k in live} == expected
    assert table.stats().inserts == total
    assert sum(table.stats().evictions.values()) == total - len(expected)
