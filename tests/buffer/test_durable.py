"""Durable tables: exact recovery, torn tails, corruption, compaction, and a SIGKILL test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import (
    CheckpointError,
    PositiveRetention,
    Prioritized,
    ReplayTable,
    TaskBalanced,
    TaskCapacity,
    Uniform,
)
from llm_replay.buffer.durable import LOG
from tests.buffer.durable_worker import numbered_batch
from tests.conftest import ROOT, make_batch

SAMPLERS = {  # the table's sampler and remover
    "uniform": lambda: {"sampler": Uniform()},
    "prioritized": lambda: {"sampler": Prioritized(alpha=0.6, decay_steps=3.0)},
    "positive_biased": lambda: {"sampler": Uniform(), "remover": PositiveRetention(delta=0.5)},
    "task_balanced": lambda: {
        "sampler": TaskBalanced(),
        "remover": TaskCapacity(inner=PositiveRetention(delta=0.5)),
    },
}


def run_ops(tables: list[ReplayTable], seed: int, steps: int = 60) -> None:
    """The same random mix of every state-changing call on each table."""
    rng = np.random.default_rng(seed)
    version = tables[0].policy_version
    for step in range(steps):
        op = rng.choice(["insert", "insert", "sample", "take", "version", "remove", "priorities"])
        if op == "insert" or tables[0].size == 0:
            batch = make_batch(
                rng, int(rng.integers(1, 12)), first_group=100 * step, version=version
            )
            for t in tables:
                t.insert(batch)
        elif op == "sample":
            n = int(rng.integers(1, 8))
            for t in tables:
                t.sample(n)
        elif op == "version":
            version += int(rng.integers(1, 3))
            for t in tables:
                t.set_policy_version(version)
        else:
            keys = tables[0].storage.keys_of(tables[0].storage.live_slots())
            chosen = rng.choice(keys, size=min(3, len(keys)), replace=False)
            priorities = rng.random(len(chosen))
            for t in tables:
                if op == "take":
                    t.take(chosen)
                elif op == "remove":
                    t.remove(chosen)
                elif isinstance(t.sampler, Prioritized):
                    t.update_priorities(chosen, priorities)


def same_state(a: ReplayTable, b: ReplayTable) -> None:
    meta_a, arrays_a = a.state()
    meta_b, arrays_b = b.state()
    assert meta_a == meta_b
    assert arrays_a.keys() == arrays_b.keys()
    for name in arrays_a:
        np.testing.assert_array_equal(arrays_a[name], arrays_b[name], err_msg=name)
    x, y = a.sample(16), b.sample(16)
    np.testing.assert_array_equal(x.keys, y.keys)
    np.testing.assert_array_equal(x.input_ids, y.input_ids)


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_reopen_recovers_the_table_exactly(tmp_path: Path, sampler: str) -> None:
    kwargs = {"max_rollouts": 40, "max_age": 6, "seed": 3}
    durable = ReplayTable.open(tmp_path / "t", **SAMPLERS[sampler](), **kwargs)
    plain = ReplayTable(**SAMPLERS[sampler](), **kwargs)
    assert durable.durable and not plain.durable
    run_ops([durable, plain], seed=1)
    # no close: as after a crash of the process
    reopened = ReplayTable.open(tmp_path / "t", **SAMPLERS[sampler](), **kwargs)
    same_state(reopened, plain)
    run_ops([reopened, plain], seed=2)  # the reopened table goes on logging
    reopened.close()
    same_state(ReplayTable.open(tmp_path / "t", **SAMPLERS[sampler](), **kwargs), plain)


def segment(directory: Path) -> Path:
    (path,) = sorted((directory / LOG).glob("*.seg"))
    return path


def test_a_torn_last_record_is_dropped_and_cut_off(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    table = ReplayTable.open(tmp_path / "t", max_rollouts=100)
    table.insert(make_batch(rng, 5))
    table.insert(make_batch(rng, 7))
    path = segment(tmp_path / "t")
    whole = path.stat().st_size
    with path.open("ab") as handle:  # half of a third insert's record
        record = path.read_bytes()
        handle.write(record[: len(record) // 3])
    reopened = ReplayTable.open(tmp_path / "t", max_rollouts=100)
    assert reopened.size == 12 and reopened.counters.insert_calls == 2
    assert segment(tmp_path / "t").stat().st_size <= whole


def test_a_damaged_record_before_the_end_is_an_error_naming_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    table = ReplayTable.open(tmp_path / "t", max_rollouts=100)
    for _ in range(3):
        table.insert(make_batch(rng, 5))
    path = segment(tmp_path / "t")
    data = bytearray(path.read_bytes())
    data[60] ^= 0xFF  # inside the first record
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"\.seg: a record whose checksum does not match"):
        ReplayTable.open(tmp_path / "t", max_rollouts=100)


def test_checkpoint_compacts_and_a_crash_before_cleanup_replays_nothing_twice(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    durable = ReplayTable.open(tmp_path / "t", max_rollouts=50)
    plain = ReplayTable(50)
    run_ops([durable, plain], seed=5, steps=30)
    old = {p.name: p.read_bytes() for p in (tmp_path / "t" / LOG).glob("*.seg")}
    durable.checkpoint()
    assert sum(p.stat().st_size for p in (tmp_path / "t" / LOG).glob("*.seg")) == 0
    for name, data in old.items():  # as if killed between the snapshot and the deletion
        (tmp_path / "t" / LOG / name).write_bytes(data)
    batch = make_batch(rng, 4, first_group=9999)
    durable.insert(batch)
    plain.insert(batch)
    same_state(ReplayTable.open(tmp_path / "t", max_rollouts=50), plain)


def test_reopening_with_other_settings_is_refused(tmp_path: Path) -> None:
    ReplayTable.open(tmp_path / "t", max_rollouts=10).close()
    with pytest.raises(
        ValueError, match=r"max_rollouts = 20: .* holds a table with max_rollouts = 10"
    ):
        ReplayTable.open(tmp_path / "t", max_rollouts=20)
    with pytest.raises(ValueError, match="sampler"):
        ReplayTable.open(tmp_path / "t", max_rollouts=10, sampler=Prioritized())
    with pytest.raises(ValueError, match=r"max_items = 2: .* holds a table with max_items = None"):
        ReplayTable.open(tmp_path / "t", max_rollouts=10, max_items=2, groups_per_item=4)
    with pytest.raises(ValueError, match=r"fsync = .sometimes."):
        ReplayTable.open(tmp_path / "u", max_rollouts=10, fsync="sometimes")
    with pytest.raises(ValueError, match="not a durable table"):
        ReplayTable(10).checkpoint()


@pytest.mark.parametrize("policy", ["always", "every"])
def test_sigkill_loses_no_acknowledged_insert(tmp_path: Path, policy: str) -> None:
    """20 kills at random moments; after each, every insert acknowledged before the kill is
    there, in order, followed by at most the one in flight, and nothing else."""
    rng = np.random.default_rng(7)
    directory = tmp_path / "t"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    acknowledged = -1
    for _ in range(20):
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/buffer/durable_worker.py"), str(directory), policy],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert worker.stdout is not None
        first = int(worker.stdout.readline())  # started and inserting
        assert first == acknowledged + 1
        acknowledged = first
        deadline = time.monotonic() + float(rng.uniform(0.0, 0.3))
        while time.monotonic() < deadline:
            acknowledged = int(worker.stdout.readline())
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        acknowledged = max([acknowledged, *(int(line) for line in worker.stdout.read().split())])
        table = ReplayTable.open(directory, max_rollouts=100_000, fsync=policy, fsync_every=4)
        groups = table.storage.group_id[table.storage.live_in_order()]
        numbers = groups[::4]
        assert np.array_equal(numbers, np.arange(len(numbers))), "in order, nothing else"
        assert acknowledged + 1 <= len(numbers) <= acknowledged + 2
        last = int(numbers[-1])
        stored = table.get(table.storage.keys_of(table.storage.live_in_order()[-4:]))[0]
        np.testing.assert_array_equal(stored.rewards, numbered_batch(last).rewards)
        acknowledged = last
        table.close()


def test_reopening_with_another_remover_is_refused_by_name(tmp_path: Path) -> None:
    ReplayTable.open(tmp_path / "t", max_rollouts=32, remover=PositiveRetention(0.5)).close()
    with pytest.raises(ValueError, match="remover"):
        ReplayTable.open(tmp_path / "t", max_rollouts=32, remover=PositiveRetention(0.25))
    with pytest.raises(ValueError, match="remover"):
        ReplayTable.open(tmp_path / "t", max_rollouts=32)
