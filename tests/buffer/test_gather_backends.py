"""The compiled gather (numba) and the numpy fallback give identical batches."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer import gather as gather_module
from llm_replay.buffer import kernels as kernels_module
from llm_replay.buffer.kernels import (
    gather_backend,
    gather_threads,
    set_gather_backend,
    set_gather_threads,
)
from llm_replay.data.batch import RolloutBatch
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


@pytest.fixture
def restore_threads() -> Iterator[None]:
    yield
    set_gather_threads(1)
    set_gather_backend("auto")


@pytest.mark.usefixtures("restore_threads")
def test_threaded_gather_gives_the_serial_batches() -> None:
    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    if threads < 2:
        pytest.skip("one CPU: numba allows one thread")
    try:
        set_gather_threads(threads)
    except ValueError as error:  # no thread-safe layer (neither OpenMP nor TBB) on this machine
        pytest.skip(str(error))
    assert gather_threads() == threads
    threaded = draws("numba", 3, seed=4)
    set_gather_threads(1)
    serial = draws("numba", 3, seed=4)
    for a, b in zip(threaded, serial, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_gather_threads_are_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="gather threads = "):
        set_gather_threads(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most"):
        set_gather_threads(numba.config.NUMBA_NUM_THREADS + 1)
    assert gather_threads() == 1


@pytest.mark.usefixtures("restore_threads")
def test_threads_from_the_environment_are_checked_when_a_table_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kernels_module, "_threads_from_env", "lots")
    with pytest.raises(ValueError, match="LLM_REPLAY_GATHER_THREADS = 'lots'"):
        ReplayTable(64, seed=0)
    table = ReplayTable(64, seed=0)  # reported once; the default (1 thread) stays
    table.insert(make_batch(np.random.default_rng(0), 8))
    assert table.sample(4).input_ids.shape[0] == 4
    assert gather_threads() == 1


def test_warm_compiles_every_signature_a_table_uses(restore_backend: None) -> None:
    """`kernels.warm` (called when a run is built) leaves nothing to compile for the first insert
    and draw, so the first training step a run times does not pay numba's start."""
    set_gather_backend("auto")
    assert kernels_module.warm()
    kernels = kernels_module.compiled()
    assert kernels is not None
    names = ("shares", "scatter", "count", "gather_rows")
    warmed = {name: len(getattr(kernels, name).signatures) for name in names}
    rng = np.random.default_rng(0)
    table = ReplayTable(300, seed=0)
    table.insert(make_batch(rng, 64, first_group=0, completion=(1, 30)))
    table.sample(16)
    assert {name: len(getattr(kernels, name).signatures) for name in names} == warmed
    set_gather_backend("numpy")
    assert not kernels_module.warm()
