"""Rate limiting: Reverb's semantics, deadlock checks, timeouts, close, and 16-thread traffic."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from llm_replay.buffer import (
    MinSize,
    RateLimiterTimeout,
    ReplayTable,
    SampleToInsertRatio,
    TableClosed,
    Uniform,
)
from tests.conftest import make_batch


def test_impossible_settings_are_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="narrower than"):
        SampleToInsertRatio(2.0, 10, error_buffer=4, max_insert_batch=4, max_sample_batch=8)
    with pytest.raises(ValueError, match="sampling would block forever"):
        SampleToInsertRatio(1.0, 10, error_buffer=(20.0, 100.0))
    with pytest.raises(ValueError, match="samples_per_insert"):
        SampleToInsertRatio(0.0, 10, error_buffer=10)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        MinSize(0)
    with pytest.raises(ValueError, match="sampling could never start"):
        ReplayTable(10, rate_limiter=MinSize(11))


def test_calls_larger_than_declared_are_refused(rng: np.random.Generator) -> None:
    limiter = SampleToInsertRatio(1.0, 4, error_buffer=20, max_insert_batch=8, max_sample_batch=8)
    table = ReplayTable(100, rate_limiter=limiter)
    with pytest.raises(ValueError, match="max_insert_batch"):
        table.insert(make_batch(rng, 9))
    with pytest.raises(ValueError, match="max_sample_batch"):
        table.sample(9)
    assert table.stats().inserts == 0


def test_sample_timeout_leaves_the_table_unchanged(rng: np.random.Generator) -> None:
    table = ReplayTable(100, rate_limiter=MinSize(10))
    table.insert(make_batch(rng, 5))
    before = table.stats().to_dict()
    start = time.monotonic()
    with pytest.raises(RateLimiterTimeout, match=r"timed out after 0\.05s"):
        table.sample(2, timeout=0.05)
    assert time.monotonic() - start >= 0.05
    assert table.stats().to_dict() == before


def test_insert_blocks_when_ahead_and_resumes_after_samples(rng: np.random.Generator) -> None:
    limiter = SampleToInsertRatio(1.0, 4, error_buffer=8, max_insert_batch=4, max_sample_batch=4)
    table = ReplayTable(1000, rate_limiter=limiter)
    for _ in range(3):
        table.insert(make_batch(rng, 4))
    with pytest.raises(RateLimiterTimeout):
        table.insert(make_batch(rng, 4), timeout=0.02)
    table.sample(4)
    table.insert(make_batch(rng, 4), timeout=0.5)


def test_close_wakes_blocked_callers(rng: np.random.Generator) -> None:
    table = ReplayTable(100, rate_limiter=MinSize(50))
    errors: list[BaseException] = []

    def blocked_sample() -> None:
        try:
            table.sample(4)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=blocked_sample)
    thread.start()
    time.sleep(0.05)
    assert thread.is_alive()
    table.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], TableClosed)
    with pytest.raises(TableClosed):
        table.insert(make_batch(rng, 1))


@pytest.mark.parametrize("spi", [0.5, 2.0])
def test_sixteen_producers_one_consumer_stay_in_band(spi: float) -> None:
    producers, batches, m, n = 16, 12, 8, 16
    total = producers * batches * m
    limiter = SampleToInsertRatio(
        spi, 32, error_buffer=3 * (m * spi + n), max_insert_batch=m, max_sample_batch=n
    )
    table = ReplayTable(total, rate_limiter=limiter, seed=5)
    inserted: list[np.ndarray] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def produce(worker: int) -> None:
        rng = np.random.default_rng(worker)
        try:
            for b in range(batches):
                keys = table.insert(make_batch(rng, m, first_group=worker * 1000 + b), timeout=20)
                with lock:
                    inserted.append(keys)
        except BaseException as error:
            failures.append(error)

    snapshots: list[tuple[int, int]] = []
    drawn = 0
    workers = [threading.Thread(target=produce, args=(w,)) for w in range(producers)]

    def consume() -> None:
        nonlocal drawn
        while True:
            try:
                drawn += len(table.sample(n, timeout=0.05))
            except RateLimiterTimeout:
                if not any(w.is_alive() for w in workers):
                    return  # producers are done and the limiter says we are far enough ahead
                continue
            except BaseException as error:
                failures.append(error)
                return
            stats = table.stats()
            snapshots.append((stats.inserts, stats.samples))

    threads = [*workers, threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)
    keys = np.concatenate(inserted)
    assert len(keys) == total and len(np.unique(keys)) == total, "nothing lost or duplicated"
    stored = table.storage.keys_of(table.storage.live_slots())
    assert np.array_equal(np.sort(stored), np.sort(keys))
    diffs = np.array([i * spi - s for i, s in snapshots])
    assert diffs.min() >= limiter.min_diff and diffs.max() <= limiter.max_diff
    assert table.stats().samples == drawn
    assert len(snapshots) > 20
    final = table.stats()
    assert abs(final.inserts * spi - final.samples - 32 * spi) <= limiter.max_diff - 32 * spi + n


def test_queue_under_contention_delivers_each_rollout_once() -> None:
    producers, batches, m = 16, 10, 4
    table = ReplayTable.queue(64, max_insert_batch=m, max_sample_batch=1)
    inserted: list[int] = []
    lock = threading.Lock()
    received: list[int] = []

    def produce(worker: int) -> None:
        rng = np.random.default_rng(worker)
        for b in range(batches):
            keys = table.insert(make_batch(rng, m, first_group=worker * 100 + b), timeout=20)
            with lock:
                inserted.extend(keys.tolist())

    def consume() -> None:
        while len(received) < producers * batches * m:
            received.extend(table.sample(1, timeout=20).keys.tolist())

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(producers)]
    consumer = threading.Thread(target=consume)
    consumer.start()
    for t in threads:
        t.start()
    for t in [*threads, consumer]:
        t.join(timeout=60)
    assert sorted(received) == sorted(inserted)
    assert len(set(received)) == len(received)
    assert table.stats().evictions["capacity_rollouts"] == 0, "a full queue blocks, never drops"


def test_wait_for_insert_and_sample_answer_without_changing_the_table(
    rng: np.random.Generator,
) -> None:
    limiter = SampleToInsertRatio(1.0, 4, error_buffer=8, max_insert_batch=4, max_sample_batch=4)
    table = ReplayTable(1000, rate_limiter=limiter)
    assert not table.wait_for_sample(4, timeout=0)  # nothing stored yet
    assert table.wait_for_insert(4, timeout=0)
    for _ in range(3):
        table.insert(make_batch(rng, 4))
    before = table.stats().to_dict()
    assert not table.wait_for_insert(4, timeout=0.02)  # the limiter holds inserts back
    assert table.wait_for_sample(4, timeout=0)
    assert table.stats().to_dict() == before
    with pytest.raises(ValueError, match="max_sample_batch"):
        table.wait_for_sample(5)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(table.wait_for_insert(4, timeout=5)))
    waiter.start()
    table.sample(4)
    waiter.join(5)
    assert woke == [True]
    table.close()
    with pytest.raises(TableClosed):
        table.wait_for_insert(4, timeout=0)


def test_sampler_without_replacement_cannot_starve_behind_the_limiter() -> None:
    """Issue example (a): inserts used to block at size 5 while a sample of 8 waited forever."""
    rng = np.random.default_rng(0)
    table = ReplayTable(
        100,
        sampler=Uniform(replacement=False),
        rate_limiter=SampleToInsertRatio(1, 1, 4.5, max_sample_batch=8),
    )
    for i in range(8):
        table.insert(make_batch(rng, 1, first_group=i), timeout=0)
    assert len(table.sample(8, timeout=0)) == 8
    with pytest.raises(ValueError, match="could never be served"):
        ReplayTable(
            4,
            sampler=Uniform(replacement=False),
            rate_limiter=SampleToInsertRatio(1, 1, 20, max_sample_batch=8),
        )


def test_age_eviction_that_empties_the_table_cannot_deadlock() -> None:
    """Issue example (b): after max_age evicted everything, insert and sample both blocked."""
    rng = np.random.default_rng(0)
    table = ReplayTable(
        100,
        max_age=1,
        rate_limiter=SampleToInsertRatio(2, 8, 12, max_insert_batch=8, max_sample_batch=8),
    )
    table.insert(make_batch(rng, 8), timeout=0)
    table.sample(8, timeout=0)
    table.insert(make_batch(rng, 8), timeout=0)
    table.set_policy_version(5)
    assert table.size == 0
    table.insert(make_batch(rng, 8, version=5), timeout=0)
    assert len(table.sample(8, timeout=0)) == 8


@settings(max_examples=200, deadline=None)
@given(
    replacement=st.booleans(),
    max_age=st.one_of(st.none(), st.integers(0, 2)),
    capacity=st.integers(8, 48),
    spi=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    min_size=st.integers(1, 8),
    error_buffer=st.floats(1.0, 60.0),
    m=st.integers(1, 8),
    n=st.integers(1, 8),
    ops=st.lists(st.integers(0, 3), min_size=1, max_size=80),
    seed=st.integers(0, 1000),
)
def test_no_accepted_configuration_can_deadlock(
    replacement: bool,
    max_age: int | None,
    capacity: int,
    spi: float,
    min_size: int,
    error_buffer: float,
    m: int,
    n: int,
    ops: list[int],
    seed: int,
) -> None:
    """Whatever a producer of m and a consumer of n do (with evictions by capacity, age and
    explicit removal in between), one of them can always proceed."""
    try:
        table = ReplayTable(
            capacity,
            sampler=Uniform(replacement=replacement),
            max_age=max_age,
            rate_limiter=SampleToInsertRatio(
                spi, min_size, error_buffer, max_insert_batch=m, max_sample_batch=n
            ),
        )
    except ValueError:
        assume(False)
        return
    rng = np.random.default_rng(seed)
    version = 0
    for op in ops:
        if op == 0 and table._can_insert(m):
            table.insert(make_batch(rng, m, version=version), timeout=0)
        elif op == 1 and table._can_sample(n):
            table.sample(n, timeout=0)
        elif op == 2:
            version += 1
            table.set_policy_version(version)
        elif op == 3 and table.size:
            live = table.storage.keys_of(table.storage.live_slots())
            table.remove(live[: int(rng.integers(1, len(live) + 1))])
        assert table._can_insert(m) or table._can_sample(n), (table, table.counters)
