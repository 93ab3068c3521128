"""Padded batches are copied outside the table lock, from pinned rows: inserts go on during the
copy, and what they write never lands on rows being copied."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.gather import PinnedRows
from llm_replay.data.rollout import Rollout
from tests.conftest import make_batch


def by_key(table: ReplayTable, batch: Any, keys: np.ndarray) -> dict[int, Rollout]:
    return dict(zip(keys.tolist(), batch.rollouts(), strict=True))


@pytest.mark.parametrize("pinned", [True, False])
def test_pinned_rows_survive_eviction_and_ring_reuse(pinned: bool) -> None:
    """Capture rows, evict them, insert until the ring comes round: pinned, the copy still reads
    what was stored (the ring moved to a new buffer instead); unpinned, the rows were overwritten."""
    rng = np.random.default_rng(0)
    table = ReplayTable.uniform(32, seed=0)
    first = make_batch(rng, 32)
    stored = by_key(table, first, table.insert(first))
    slots = table.storage.live_slots()
    keys = table.storage.keys_of(slots).tolist()
    token, rows = table.storage.pin(slots) if pinned else (-1, table.storage.rows(slots))
    for i in range(300):
        table.insert(make_batch(rng, 32, first_group=100 + 8 * i))
    ids, logprobs, attention, loss = rows.gather()
    intact = all(
        np.array_equal(ids[r][attention[r]], np.concatenate([w.prompt_ids, w.completion_ids]))
        and np.array_equal(logprobs[r][loss[r]], w.behaviour_logprobs)
        for r, w in enumerate(stored[k] for k in keys)
    )
    assert intact == pinned
    assert (table.storage.arena is not rows.arena) == pinned
    if pinned:
        table.storage.unpin(token)
    assert table.storage._pins == {}


def test_an_insert_completes_while_a_sample_is_being_copied(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = ReplayTable.uniform(64, seed=0)
    first = make_batch(rng, 64)
    stored = by_key(table, first, table.insert(first))
    copying, release = threading.Event(), threading.Event()
    gather = PinnedRows.gather

    def held_copy(self: PinnedRows, pad_id: int = 0) -> Any:
        copying.set()
        assert release.wait(60)
        return gather(self, pad_id)

    monkeypatch.setattr(PinnedRows, "gather", held_copy)
    result: dict[str, Any] = {}
    sampler = threading.Thread(target=lambda: result.update(sample=table.sample(48)))
    sampler.start()
    assert copying.wait(60)
    inserter = threading.Thread(
        target=lambda: [
            table.insert(make_batch(rng, 64, first_group=100 + 16 * i)) for i in range(5)
        ]
    )
    inserter.start()
    inserter.join(60)
    assert not inserter.is_alive(), "the insert waited for the sample's copy"
    assert sampler.is_alive() and "sample" not in result  # the copy is still in flight
    assert table.stats().inserts == 64 * 6
    release.set()
    sampler.join(60)
    sample = result["sample"]
    assert sample.rollouts() == [stored[k] for k in sample.keys.tolist()]
    assert table.storage._pins == {}


def test_get_and_sample_unpin_when_the_copy_fails(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = ReplayTable.uniform(16, seed=0)
    table.insert(make_batch(rng, 16))

    def broken(self: PinnedRows, pad_id: int = 0) -> Any:
        raise MemoryError("no room for the batch")

    monkeypatch.setattr(PinnedRows, "gather", broken)
    with pytest.raises(MemoryError):
        table.sample(8)
    with pytest.raises(MemoryError):
        table.get(table.storage.keys_of(table.storage.live_slots()))
    assert table.storage._pins == {}
