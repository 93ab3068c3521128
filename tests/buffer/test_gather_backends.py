"""The compiled gather (numba) and the numpy fallback give identical batches."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer import gather as gather_module
from llm_replay.buffer import kernels as kernels_module
from llm_replay.buffer.kernels import gather_backend, set_gather_backend
from llm_replay.rollout import RolloutBatch
from tests.conftest import make_batch

numba = pytest.importorskip("numba")


@pytest.fixture
def restore_backend() -> Iterator[None]:
    yield
    set_gather_backend("auto")


def draws(backend: str, pad_id: int, seed: int) -> list[tuple[np.ndarray, ...]]:
    set_gather_backend(backend)
    rng = np.random.default_rng(seed)
    table = ReplayTable(300, seed=seed)
    for i in range(6):  # a ring small enough to wrap and relayout while drawing
        table.insert(make_batch(rng, 64, first_group=100 * i, completion=(1, 60)))
    empty = RolloutBatch.from_ragged(
        prompt_ids=[[1, 2]],
        completion_ids=[[]],
        behaviour_logprobs=[[]],
        rewards=[0.0],
        group_ids=[9999],
        policy_versions=[0],
        allow_empty=True,
    )
    table.insert(empty)
    out = []
    for n in (1, 7, 64, 256):
        s = table.sample(n, pad_id=pad_id)
        out.append(
            (
                s.keys,
                s.input_ids,
                s.behaviour_logprobs.view(np.int32),
                s.attention_mask,
                s.loss_mask,
            )
        )
    return out


@pytest.mark.usefixtures("restore_backend")
@pytest.mark.parametrize("pad_id", [0, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numba_and_numpy_gather_agree_bit_for_bit(pad_id: int, seed: int) -> None:
    compiled = draws("numba", pad_id, seed)
    assert gather_backend() == "numba"
    fallback = draws("numpy", pad_id, seed)
    assert gather_backend() == "numpy"
    for a, b in zip(compiled, fallback, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


@pytest.mark.usefixtures("restore_backend")
def test_backend_choice_is_checked_and_falls_back_without_numba(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="gather backend = 'fast'"):
        set_gather_backend("fast")
    monkeypatch.setattr(kernels_module, "_kernels", None)
    monkeypatch.setattr(kernels_module, "_kernel_failed", True)  # as if numba were missing
    set_gather_backend("auto")
    assert gather_backend() == "numpy"
    with pytest.raises(ValueError, match="numba is not installed"):
        set_gather_backend("numba")


@pytest.mark.usefixtures("restore_backend")
@pytest.mark.parametrize("seed", [0, 1])
def test_numba_and_numpy_inserts_write_the_same_arena(seed: int) -> None:
    arenas = []
    for backend in ("numba", "numpy"):
        set_gather_backend(backend)
        rng = np.random.default_rng(seed)
        table = ReplayTable(200, seed=seed)
        for i in range(8):  # wraps the ring, so both relayout paths are crossed too
            table.insert(make_batch(rng, 48, first_group=100 * i, completion=(1, 40)))
        used = table.storage.head
        arenas.append((table.storage.arena[:used].copy(), table.storage.prompt_offset.copy()))
    np.testing.assert_array_equal(arenas[0][0], arenas[1][0])
    np.testing.assert_array_equal(arenas[0][1], arenas[1][1])


@pytest.mark.usefixtures("restore_backend")
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_reuse_counts_count_a_repeated_slot_once_per_draw(backend: str) -> None:
    set_gather_backend(backend)
    counter = np.zeros(6, dtype=np.int32)
    gather_module.increment(counter, np.array([4, 1, 4, 4, 0], dtype=np.int64))
    gather_module.increment(counter, np.array([2, 3], dtype=np.int64))
    np.testing.assert_array_equal(counter, [1, 1, 1, 1, 3, 0])
