"""Rows of a group store their prompt once: smaller arena, same rollouts back, every path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable, layout
from llm_replay.data.batch import RolloutBatch
from tests.conftest import make_batch


def group_batch(
    prompts: list[list[int]], groups: list[int], completion: int = 3, first_token: int = 1000
) -> RolloutBatch:
    n = len(prompts)
    completions = [
        list(range(first_token + 10 * i, first_token + 10 * i + completion)) for i in range(n)
    ]
    return RolloutBatch.from_ragged(
        prompt_ids=prompts,
        completion_ids=completions,
        behaviour_logprobs=[[-0.5 - 0.01 * i] * completion for i in range(n)],
        rewards=np.arange(n, dtype=float),
        group_ids=groups,
        policy_versions=0,
    )


def stored(table: ReplayTable, keys: np.ndarray) -> RolloutBatch:
    slots, found = table.storage.slots_of(keys)
    assert found.all()
    return table.storage.gather_batch(slots)


def assert_same_rollouts(a: RolloutBatch, b: RolloutBatch) -> None:
    for x, y in zip(a.rollouts(), b.rollouts(), strict=True):
        np.testing.assert_array_equal(x.prompt_ids, y.prompt_ids)
        np.testing.assert_array_equal(x.completion_ids, y.completion_ids)
        np.testing.assert_array_equal(x.behaviour_logprobs, y.behaviour_logprobs)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_sharing_is_decided_by_group_and_compared_tokens(backend: str) -> None:
    if backend == "numba":
        pytest.importorskip("numba")
    from llm_replay.buffer.kernels import set_gather_backend

    prompt = [5, 6, 7, 8]
    batch = group_batch(
        [prompt, prompt, [5, 6, 7, 9], prompt, prompt, [1, 2], [1, 2], [1, 3]],
        [0, 0, 0, 0, 1, 2, 2, 2],
    )
    set_gather_backend(backend)
    try:
        shares = layout.shares_previous_prompt(
            batch.group_ids, batch.prompt_lengths.astype(np.int64), batch.prompt_ids
        )
    finally:
        set_gather_backend("auto")
    # row 2: same group, different last token; row 3: same as row 1 but not adjacent to it;
    # row 4: same tokens, other group; row 7: same group and length, second token differs
    assert shares.tolist() == [False, True, False, False, False, False, True, False]


def test_hand_computed_layout_and_compaction() -> None:
    shares = np.array([False, True, True, False])
    p = np.array([4, 4, 4, 2])
    c = np.array([1, 2, 0, 3])
    units = layout.stored_units(shares, p, c)
    assert units.tolist() == [6, 4, 0, 8]
    starts = 100 + layout.exclusive_cumsum(units)
    prompt_offset, completion_offset = layout.row_offsets(shares, p, starts)
    assert prompt_offset.tolist() == [100, 100, 100, 110]
    assert completion_offset.tolist() == [104, 106, 110, 112]
    assert (completion_offset - p >= 0).all()
    # drop row 0 (the leader): its prompt stays, its completion goes
    keep = np.array([1, 2, 3])
    src, lengths, dst, new_prompt, new_completion = layout.compacted(
        prompt_offset[keep], completion_offset[keep], p[keep], c[keep]
    )
    assert src.tolist() == [100, 106, 100, 110, 110, 112]
    assert lengths.tolist() == [4, 4, 0, 0, 2, 6]
    assert new_prompt.tolist() == [0, 0, 8]
    assert new_completion.tolist() == [4, 8, 10]
    # row 1's completion (106..110) and row 3's block (110..) are adjacent: one copy
    assert layout.contiguous_runs(src, lengths, dst) == [(100, 0, 4), (106, 4, 12)]


def test_a_group_stores_its_prompt_once_and_reads_back_whole() -> None:
    prompt = list(range(1, 101))
    batch = group_batch([prompt] * 8, [3] * 8, completion=10)
    table = ReplayTable(16, seed=0)
    keys = table.insert(batch)
    stats = table.stats()
    assert stats.payload_nbytes == 4 * 8 * (100 + 20)
    assert stats.stored_nbytes == 4 * (100 + 8 * 20)
    assert table.storage.head == 100 + 8 * 20
    assert_same_rollouts(stored(table, keys), batch)
    sample = table.sample(8)
    for row in range(8):
        ids = sample.input_ids[row][sample.attention_mask[row]]
        assert ids[:100].tolist() == prompt


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_live_follower_keeps_its_prompt_through_compaction(backend: str) -> None:
    if backend == "numba":
        pytest.importorskip("numba")
    from llm_replay.buffer.kernels import set_gather_backend

    set_gather_backend(backend)
    try:
        prompt = [7, 8, 9]
        batch = group_batch([prompt] * 4, [1] * 4, completion=2)
        table = ReplayTable(8, seed=0)
        keys = table.insert(batch)
        storage = table.storage
        slots, _ = storage.slots_of(keys)
        storage.remove(slots[:2])  # the leader and one follower go
        storage._relayout(0, force=True)
        assert storage.stored_nbytes() == 4 * (3 + 2 * 4)
        assert storage.head == 3 + 2 * 4
        assert_same_rollouts(stored(table, keys[2:]), batch.select(np.array([2, 3])))
        ids, logprobs, _, _ = storage.gather_padded(slots[2:])
        assert ids[:, :3].tolist() == [prompt, prompt]
        expected = np.array([[-0.52, -0.52], [-0.53, -0.53]], dtype=np.float32)
        np.testing.assert_array_equal(logprobs[:, 3:], expected)
    finally:
        set_gather_backend("auto")


def test_a_checkpoint_round_trip_keeps_prompts_shared(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    table = ReplayTable(200, seed=0)
    for i in range(5):
        table.insert(make_batch(rng, 40, first_group=100 * i, group_size=8, prompt=(20, 40)))
    before = table.stats()
    assert before.stored_nbytes < 0.6 * before.payload_nbytes
    reopened = ReplayTable.load(table.save(tmp_path / "table"))
    after = reopened.stats()
    assert (after.payload_nbytes, after.stored_nbytes) == (
        before.payload_nbytes,
        before.stored_nbytes,
    )
    keys = table.storage.keys_of(table.storage.live_in_order())
    assert_same_rollouts(stored(reopened, keys), stored(table, keys))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_an_empty_table_round_trips_on_both_backends(backend: str, tmp_path: Path) -> None:
    if backend == "numba":
        pytest.importorskip("numba")
    from llm_replay.buffer.kernels import set_gather_backend

    set_gather_backend(backend)
    try:
        reopened = ReplayTable.load(ReplayTable(8).save(tmp_path / "table"))
        assert reopened.size == 0 and reopened.stats().stored_nbytes == 0
    finally:
        set_gather_backend("auto")
