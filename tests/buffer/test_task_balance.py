"""Replay that knows the environments of a mixture (issue #56): the task-balanced sampler, the
per-task capacity remover and the per-task stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_replay.buffer import (
    PositiveRetention,
    ReplayTable,
    TaskBalanced,
    TaskCapacity,
    Uniform,
    make_sampler,
)
from llm_replay.buffer.stats import merge_stats
from llm_replay.data.batch import RolloutBatch
from tests.conftest import make_batch


def tagged(
    rng: np.random.Generator, tasks: list[str], version: int = 0, first_group: int = 0, **kw: object
) -> RolloutBatch:
    return make_batch(
        rng,
        len(tasks),
        version=version,
        first_group=first_group,
        **kw,  # type: ignore[arg-type]
    ).with_tasks(tasks)


def task_of(sample_codes: np.ndarray, names: tuple[str, ...]) -> list[str]:
    return [names[int(c)] for c in sample_codes]


# ----------------------------------------------------------------- sampler


def test_skewed_population_draws_balanced() -> None:
    """90 / 10 rows: each task gets about half the draws, each row uniformly within its task."""
    rng = np.random.default_rng(0)
    table = ReplayTable(200, sampler=TaskBalanced(), seed=3)
    keys = table.insert(tagged(rng, ["easy"] * 90 + ["hard"] * 10))
    draws = 40_000
    sample = table.sample(draws)
    names = task_of(sample.task_codes, sample.task_names)
    hard = names.count("hard") / draws
    assert abs(hard - 0.5) < 0.01  # sd ≈ 0.0025
    # within "hard": each of its 10 rows ≈ 1/20 of all draws
    hard_keys = keys[90:]
    counts = np.array([(sample.keys == k).sum() for k in hard_keys])
    assert np.all(np.abs(counts / draws - 0.05) < 0.006)
    assert np.allclose(sample.probabilities[np.array(names) == "hard"], 0.5 / 10)
    assert np.allclose(sample.probabilities[np.array(names) == "easy"], 0.5 / 90)
    assert np.all(sample.importance_weights == 1.0)


def test_weights_set_the_task_proportions() -> None:
    rng = np.random.default_rng(1)
    table = ReplayTable(200, sampler=TaskBalanced(weights={"hard": 3.0}), seed=5)
    table.insert(tagged(rng, ["easy"] * 60 + ["hard"] * 20 + ["mid"] * 20))
    sample = table.sample(50_000)
    names = np.array(task_of(sample.task_codes, sample.task_names))
    for task, expected in [("hard", 0.6), ("easy", 0.2), ("mid", 0.2)]:
        assert abs((names == task).mean() - expected) < 0.01
    assert np.allclose(sample.probabilities[names == "hard"], 0.6 / 20)


def test_beta_reweights_toward_uniform() -> None:
    rng = np.random.default_rng(2)
    table = ReplayTable(100, sampler=TaskBalanced(beta=1.0), seed=5)
    table.insert(tagged(rng, ["a"] * 30 + ["b"] * 10))
    sample = table.sample(200)
    names = np.array(task_of(sample.task_codes, sample.task_names))
    # P(a row) = 0.5/30, P(b row) = 0.5/10; weights (P / P_min)^-1: a -> 1, b -> 1/3
    assert np.allclose(sample.importance_weights[names == "a"], 1.0)
    assert np.allclose(sample.importance_weights[names == "b"], 1 / 3)


@pytest.mark.parametrize("task", ["", "only"])
def test_one_task_draws_exactly_as_uniform(task: str) -> None:
    tables = [ReplayTable(64, sampler=s, seed=11) for s in (Uniform(), TaskBalanced())]
    for i in range(6):
        batch = tagged(np.random.default_rng(i), [task] * 16, version=i, first_group=4 * i)
        for t in tables:
            t.insert(batch)
            t.set_policy_version(i)
        if i == 3:
            for t in tables:
                t.remove(t.sample(5).keys)
        a, b = (t.sample(32) for t in tables)
        assert np.array_equal(a.keys, b.keys)
        assert np.array_equal(a.probabilities, b.probabilities)


def test_back_to_one_task_after_the_other_leaves_draws_as_uniform() -> None:
    rng = np.random.default_rng(4)
    table = ReplayTable(64, sampler=TaskBalanced(), seed=2)
    keys = table.insert(tagged(rng, ["a"] * 10 + ["b"] * 5))
    table.remove(keys[10:])
    sample = table.sample(100)
    assert set(sample.keys.tolist()) <= set(keys[:10].tolist())
    assert np.allclose(sample.probabilities, 1 / 10)


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"weights\['a'\]"):
        TaskBalanced(weights={"a": 0.0})
    with pytest.raises(ValueError, match="beta"):
        TaskBalanced(beta=-1.0)
    assert isinstance(make_sampler("task_balanced", weights={"a": 2.0}), TaskBalanced)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.lists(st.sampled_from("abc"), min_size=1, max_size=12)),
        st.tuples(st.just("remove"), st.integers(0, 2**31)),
        st.tuples(st.just("sample"), st.integers(1, 40)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(ops=operations, capacity=st.integers(8, 40))
def test_sampler_draws_only_live_rows(ops: list[tuple[str, object]], capacity: int) -> None:
    """Whatever inserts, evictions (capacity) and removals came before, every draw is a live row
    and each draw's probability is its task's weight over the task's live rows."""
    rng = np.random.default_rng(0)
    table = ReplayTable(capacity, sampler=TaskBalanced(), seed=1)
    group = 0
    for op, arg in ops:
        if op == "insert":
            tasks = list(arg)[:capacity]  # type: ignore[call-overload]
            table.insert(tagged(rng, tasks, first_group=group, group_size=1))
            group += len(tasks)
        elif op == "remove" and table.size:
            live = table.storage.keys_of(table.storage.live_slots())
            pick = np.random.default_rng(int(arg)).choice(len(live), max(1, len(live) // 3))  # type: ignore[call-overload]
            table.remove(live[pick])
        elif op == "sample" and table.size:
            sample = table.sample(int(arg))  # type: ignore[call-overload]
            live = set(table.storage.keys_of(table.storage.live_slots()).tolist())
            assert set(sample.keys.tolist()) <= live
            codes = table.storage.task_code[table.storage.live_slots()]
            held = np.bincount(codes, minlength=len(table.storage.task_names))
            tasks = np.count_nonzero(held)
            expected = 1.0 / tasks / held[sample.task_codes]
            assert np.allclose(sample.probabilities, expected)
        sampler = table.sampler
        assert isinstance(sampler, TaskBalanced)
        listed = np.concatenate(
            [sampler._members[c][: sampler._count[c]] for c in range(len(sampler._count))]
            or [np.zeros(0, np.int64)]
        )
        assert sorted(listed.tolist()) == sorted(table.storage.live_slots().tolist())


def test_state_round_trip_draws_the_same(tmp_path: object) -> None:
    rng = np.random.default_rng(6)
    table = ReplayTable(50, sampler=TaskBalanced(weights={"b": 2.0}), seed=9)
    keys = table.insert(tagged(rng, ["a"] * 20 + ["b"] * 8 + ["c"] * 4))
    table.remove(keys[[1, 5, 21, 30]])
    table.insert(tagged(rng, ["c"] * 6 + ["a"] * 3, first_group=100))
    restored = ReplayTable.load(table.save(tmp_path / "t"))  # type: ignore[operator]
    assert isinstance(restored.sampler, TaskBalanced)
    assert restored.sampler.weights == {"b": 2.0}
    for _ in range(3):
        assert np.array_equal(table.sample(64).keys, restored.sample(64).keys)


def test_corrupt_sampler_state_is_refused() -> None:
    rng = np.random.default_rng(7)
    table = ReplayTable(20, sampler=TaskBalanced(), seed=0)
    table.insert(tagged(rng, ["a"] * 4 + ["b"] * 3))
    meta, arrays = table.state()
    arrays["sampler.counts"] = np.array([0, 3, 4])  # a's and b's counts swapped
    with pytest.raises(ValueError, match="by task"):
        ReplayTable.from_state(meta, arrays)


# ----------------------------------------------------------------- per-task capacity


def held(table: ReplayTable) -> dict[str, int]:
    st_ = table.storage
    codes = st_.task_code[st_.live_slots()]
    return {st_.task_names[c]: int(n) for c, n in enumerate(np.bincount(codes)) if n}


def test_one_task_cannot_fill_the_table() -> None:
    rng = np.random.default_rng(8)
    table = ReplayTable(40, remover=TaskCapacity(), seed=0)
    table.insert(tagged(rng, ["hard"] * 6))
    first_easy = None
    for i in range(10):
        keys = table.insert(tagged(rng, ["easy"] * 8, version=i, first_group=10 + 2 * i))
        first_easy = keys if first_easy is None else first_easy
    assert held(table) == {"hard": 6, "easy": 20}  # 1/2 of 40 each
    # the easy task's oldest rows went first
    live = set(table.storage.keys_of(table.storage.live_slots()).tolist())
    assert not live & set(first_easy.tolist())
    assert table.stats().evictions["retention"] == 80 - 20


def test_single_task_is_unchanged_by_task_capacity() -> None:
    batches = [make_batch(np.random.default_rng(i), 8, first_group=2 * i) for i in range(8)]
    plain, capped = ReplayTable(20, seed=1), ReplayTable(20, remover=TaskCapacity(), seed=1)
    for batch in batches:
        assert np.array_equal(plain.insert(batch), capped.insert(batch))
    assert np.array_equal(plain.sample(16).keys, capped.sample(16).keys)


def test_an_insert_over_its_cap_drops_its_earliest_rows() -> None:
    rng = np.random.default_rng(9)
    table = ReplayTable(20, remover=TaskCapacity(shares={"a": 0.25}), seed=0)
    keys = table.insert(tagged(rng, ["a"] * 8 + ["b"] * 2))
    assert (keys[:3] == -1).all() and (keys[3:] >= 0).all()
    assert held(table) == {"a": 5, "b": 2}


@settings(max_examples=60, deadline=None)
@given(
    inserts=st.lists(st.lists(st.sampled_from("abcd"), min_size=1, max_size=10), max_size=25),
    capacity=st.integers(4, 30),
    share=st.one_of(st.none(), st.floats(0.1, 1.0)),
    positive=st.booleans(),
)
def test_every_task_stays_within_its_share(
    inserts: list[list[str]], capacity: int, share: float | None, positive: bool
) -> None:
    rng = np.random.default_rng(0)
    inner = PositiveRetention(0.5) if positive else None
    remover = TaskCapacity(share=share, inner=inner)
    table = ReplayTable(capacity, remover=remover, seed=0)
    group = 0
    for version, whole in enumerate(inserts):
        tasks = whole[:capacity]
        keys = table.insert(tagged(rng, tasks, version=version, first_group=group, group_size=1))
        group += len(tasks)
        counts = held(table)
        caps = remover.caps(list(counts))
        assert all(counts[t] <= caps[t] for t in counts), (counts, caps)
        assert table.size <= capacity
        # the counts the remover keeps match the storage
        assert remover._stored_counts() == counts
        assert len(keys) == len(tasks)
        if inner is not None:  # the inner remover's bookkeeping stays exact
            assert inner._fresh_live + inner._kept_live == table.size
            assert inner._fresh_live <= inner.fresh_capacity
            assert inner._kept_live <= inner.correct_capacity


def test_positive_retention_inside_the_caps_keeps_the_hard_tasks_room() -> None:
    """Positive-biased replay on a mixture: without caps the easy task's successes fill the kept
    window; with them the hard task keeps its half."""
    rng = np.random.default_rng(10)

    def run(remover: object) -> dict[str, int]:
        table = ReplayTable(40, remover=remover, seed=0)  # type: ignore[arg-type]
        for i in range(30):
            easy = tagged(rng, ["easy"] * 6, version=i, first_group=100 * i, correct_rate=0.9)
            hard = tagged(rng, ["hard"] * 2, version=i, first_group=100 * i + 50, correct_rate=0.1)
            table.insert(RolloutBatch.concat([easy, hard]))
        return held(table)

    plain = run(PositiveRetention(0.5))
    capped = run(TaskCapacity(inner=PositiveRetention(0.5)))
    assert plain["easy"] > 30
    assert capped["easy"] <= 20 and capped["hard"] >= plain["hard"]


def test_capacity_state_round_trip(tmp_path: object) -> None:
    rng = np.random.default_rng(11)
    remover = TaskCapacity(share=0.4, shares={"b": 0.2}, inner=PositiveRetention(0.5))
    table = ReplayTable(30, remover=remover, seed=4)
    for i in range(6):
        table.insert(tagged(rng, ["a"] * 5 + ["b"] * 3 + ["c"] * 2, version=i, first_group=9 * i))
    restored = ReplayTable.load(table.save(tmp_path / "t"))  # type: ignore[operator]
    got = restored.remover
    assert isinstance(got, TaskCapacity) and isinstance(got.inner, PositiveRetention)
    assert got.config() == remover.config()
    for i in range(6, 10):
        batch = tagged(rng, ["a"] * 7 + ["c"] * 3, version=i, first_group=9 * i)
        assert np.array_equal(table.insert(batch), restored.insert(batch))
    assert held(table) == held(restored)


def test_durable_table_recovers_a_mixture_exactly(tmp_path: object) -> None:
    """The log replays inserts through the remover's caps and the sampler's per-task index."""

    def parts() -> dict[str, object]:
        return {
            "sampler": TaskBalanced(weights={"a": 0.5}),
            "remover": TaskCapacity(inner=PositiveRetention(0.5)),
            "seed": 3,
        }

    rng = np.random.default_rng(14)
    path = tmp_path / "t"  # type: ignore[operator]
    durable = ReplayTable.open(path, max_rollouts=24, **parts())  # type: ignore[arg-type]
    plain = ReplayTable(24, **parts())  # type: ignore[arg-type]
    for i in range(8):
        tasks = list(rng.choice(["a", "b", "c"], int(rng.integers(1, 9)), p=[0.7, 0.2, 0.1]))
        batch = tagged(rng, tasks, version=i, first_group=20 * i)
        for t in (durable, plain):
            t.insert(batch)
            t.set_policy_version(i)
            t.sample(5)
    durable.close()
    reopened = ReplayTable.open(path, max_rollouts=24, **parts())  # type: ignore[arg-type]
    assert held(reopened) == held(plain)
    assert np.array_equal(reopened.sample(32).keys, plain.sample(32).keys)
    reopened.close()


def test_bad_shares_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="share"):
        TaskCapacity(share=0.0)
    with pytest.raises(ValueError, match=r"shares\['a'\]"):
        TaskCapacity(shares={"a": 1.5})


# ----------------------------------------------------------------- stats


def test_single_task_stats_and_metrics_are_unchanged() -> None:
    table = ReplayTable(40, seed=0)
    table.insert(make_batch(np.random.default_rng(0), 12))
    stats = table.stats()
    assert "tasks" not in stats.to_dict()
    assert not any("/task/" in k for k in stats.metrics())


def test_per_task_stats_on_a_mixture() -> None:
    rng = np.random.default_rng(12)
    table = ReplayTable(40, seed=0)
    table.insert(tagged(rng, ["a"] * 6, version=0))
    table.insert(tagged(rng, ["b"] * 2, version=2, first_group=10))
    table.set_policy_version(3)
    stats = table.stats()
    assert stats.tasks["a"].size == 6 and stats.tasks["b"].size == 2
    assert math.isclose(stats.tasks["a"].share, 0.75)
    assert math.isclose(stats.tasks["a"].age_mean, 3.0)
    assert math.isclose(stats.tasks["b"].age_mean, 1.0)
    metrics = stats.metrics()
    assert metrics["buffer/task/b/share"] == 0.25
    assert metrics["buffer/task/a/size"] == 6.0
    assert "buffer/task/a/correct_share" in metrics
    assert set(stats.to_dict()["tasks"]) == {"a", "b"}


def test_merged_shards_add_up_per_task() -> None:
    rng = np.random.default_rng(13)
    one, two = ReplayTable(20, seed=0), ReplayTable(20, seed=0)
    one.insert(tagged(rng, ["a"] * 4))  # a shard holding one task
    two.insert(tagged(rng, ["a"] * 2 + ["b"] * 2))
    merged = merge_stats([one.stats(), two.stats()], name="sharded")
    assert merged.tasks["a"].size == 6 and math.isclose(merged.tasks["b"].share, 0.25)
