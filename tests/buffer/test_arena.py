"""The disk-backed arena: same table behaviour as in RAM, old files unlinked, pages released."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.arena import DiskArena
from tests.conftest import make_batch


def churn(table: ReplayTable, seed: int) -> list[np.ndarray]:
    """Inserts that grow, wrap and relayout the ring, with samples in between."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(30):
        table.insert(
            make_batch(rng, int(rng.integers(5, 40)), first_group=100 * i, completion=(1, 300))
        )
        if i % 3 == 2:
            s = table.sample(16)
            out += [s.keys, s.input_ids, s.behaviour_logprobs, s.loss_mask]
        if i % 7 == 6:
            live = table.storage.keys_of(table.storage.live_slots())
            table.remove(live[::5])
    return out


def test_disk_arena_table_matches_the_in_memory_one(tmp_path: Path) -> None:
    memory = ReplayTable(200, seed=4)
    disk = ReplayTable(200, seed=4, arena_dir=tmp_path / "arena", resident_budget=1 << 16)
    for a, b in zip(churn(memory, 1), churn(disk, 1), strict=True):
        np.testing.assert_array_equal(a, b)
    meta_m, arrays_m = memory.state()
    meta_d, arrays_d = disk.state()
    assert meta_m == meta_d
    for name in arrays_m:
        np.testing.assert_array_equal(arrays_m[name], arrays_d[name])
    store = disk.storage.arena_store
    assert isinstance(store, DiskArena) and store.releases > 0  # pages were let go and re-read
    assert len(list((tmp_path / "arena").glob("arena-*.i32"))) == 1  # old buffers unlinked
    assert type(disk.storage.arena).__name__ == "memmap"


def test_pinned_rows_survive_a_relayout_onto_a_new_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    table = ReplayTable(500, arena_dir=tmp_path / "arena")
    keys = table.insert(make_batch(rng, 20, completion=(50, 60)))
    expected, _ = table.get(keys[:5])
    slots, _ = table.storage.slots_of(keys[:5])
    pin, rows = table.storage.pin(slots)
    before = set((tmp_path / "arena").glob("arena-*.i32"))
    for i in range(20):  # grows the arena several times: new files, old ones unlinked
        table.insert(make_batch(rng, 20, first_group=100 + 10 * i, completion=(200, 400)))
    assert not before & set((tmp_path / "arena").glob("arena-*.i32"))
    ids, logprobs, _, _ = rows.gather()
    table.storage.unpin(pin)
    np.testing.assert_array_equal(ids, expected.input_ids)
    np.testing.assert_array_equal(logprobs, expected.behaviour_logprobs)


def test_a_durable_table_can_keep_its_arena_on_disk(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    kwargs = {"max_rollouts": 100, "arena_dir": tmp_path / "arena"}
    table = ReplayTable.open(tmp_path / "t", **kwargs)
    keys = table.insert(make_batch(rng, 30))
    expected, _ = table.get(keys)
    reopened = ReplayTable.open(tmp_path / "t", **kwargs)
    assert reopened.storage.arena_store.disk
    np.testing.assert_array_equal(reopened.get(keys)[0].input_ids, expected.input_ids)
    with pytest.raises(ValueError, match="resident_budget"):
        ReplayTable(10, arena_dir=tmp_path / "x", resident_budget=10)
