"""The compiled kernels (numba, the optional `fast` extra) and the switch that chooses them.

The buffer's hot loops (the padded gather, the arena scatter of an insert, the prompt-sharing
check, reuse counting) have a numpy path everywhere they are used and a compiled one here. This
module owns loading numba, so that every module needing a kernel imports it from one place below
them all (`gather`, `layout` and `table` use it; it imports nothing of llm_replay).

`LLM_REPLAY_GATHER=numpy` (or `set_gather_backend("numpy")`) forces the numpy paths; "auto", the
default, uses the kernels when numba imports; "numba" requires them. The kernels are written in
plain Python below and compiled on first use (cached on disk by numba); tests check each against
its numpy path.

`set_gather_threads(n)` (or `LLM_REPLAY_GATHER_THREADS=n`) spreads the padded gather's rows over
n threads (numba `prange`): a batch's rows are random reads, bound by memory latency, and threads
overlap them (1.2× on a sample's median latency on two idle cores here). It is off by default
because those threads compete with the learner's own (torch's intra-op threads) and because only
a thread-safe numba threading layer (OpenMP or TBB) may serve calls from several Python threads at
once; it is refused on numba's `workqueue` layer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_replay.checks import integer

BACKENDS = ("auto", "numba", "numpy")


@dataclass(frozen=True)
class Kernels:
    gather_rows: Callable[..., int]
    scatter: Callable[..., None]
    count: Callable[..., None]
    shares: Callable[..., None]


_backend = os.environ.get("LLM_REPLAY_GATHER", "auto")
_kernels: Kernels | None = None
_kernel_failed = False
_threads = 1
_threads_from_env: str | None = os.environ.get("LLM_REPLAY_GATHER_THREADS")
_parallel_gather: Callable[..., int] | None = None
prange = range  # numba.prange once numba is loaded (the kernels name it as a global)


def set_gather_backend(name: str) -> None:
    """ "auto" (numba when it imports, else numpy), "numba" (required) or "numpy"."""
    global _backend
    if name not in BACKENDS:
        raise ValueError(f"gather backend = {name!r}: choose one of {BACKENDS}")
    if name == "numba" and _load() is None:
        raise ValueError(
            "gather backend = 'numba': numba is not installed (pip install 'llm-replay[fast]')"
        )
    _backend = name


def gather_backend() -> str:
    """The backend the buffer uses now: "numba" or "numpy"."""
    return "numba" if compiled() is not None else "numpy"


def set_gather_threads(n: int) -> None:
    """Threads for the compiled padded gather (1: the serial kernel, the default)."""
    global _threads, _parallel_gather
    integer("gather threads", n, minimum=1)
    if n > 1:
        if _load() is None:
            raise ValueError(f"gather threads = {n}: needs numba (pip install 'llm-replay[fast]')")
        import numba

        limit = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
        if n > limit:
            raise ValueError(
                f"gather threads = {n}: numba may use at most {limit} "
                "here (NUMBA_NUM_THREADS, the CPUs this process may run on)"
            )
        kernel = _parallel_gather or numba.njit(cache=True, nogil=True, parallel=True)(
            _gather_rows_parallel
        )
        offsets, lengths = np.zeros(1, np.int64), np.zeros(1, np.int32)
        tokens, masks = np.zeros((1, 0), np.int32), np.zeros((1, 0), np.bool_)
        # one empty row with the real call's types: compiles, and starts numba's threading
        # layer so that it can be checked
        kernel(lengths, offsets, offsets, lengths, lengths, 0, tokens, tokens, masks, masks)
        layer = numba.threading_layer()  # type: ignore[attr-defined]
        if layer not in ("omp", "tbb"):
            raise ValueError(
                f"gather threads = {n}: numba's {layer!r} threading layer cannot serve calls "
                "from several threads at once; install tbb (pip install tbb) or use 1"
            )
        _parallel_gather = kernel
    _threads = n


def apply_thread_environment() -> None:
    """Take `LLM_REPLAY_GATHER_THREADS` into account (once; tables call this when created)."""
    global _threads_from_env
    if _threads_from_env is None:
        return
    requested, _threads_from_env = _threads_from_env, None
    try:
        set_gather_threads(int(requested))
    except ValueError as error:
        raise ValueError(f"LLM_REPLAY_GATHER_THREADS = {requested!r}: {error}") from None


def gather_threads() -> int:
    """Threads the compiled gather uses now (1 with the numpy backend)."""
    return _threads if compiled() is not None else 1


def gather_rows(*args: Any) -> None:
    """The compiled padded gather (see `buffer.gather.PinnedRows.gather`) on the chosen threads."""
    kernels = compiled()
    assert kernels is not None, "gather_rows needs the compiled backend"
    if _threads > 1 and _parallel_gather is not None:
        import numba

        numba.set_num_threads(_threads)
        _parallel_gather(*args)
    else:
        kernels.gather_rows(*args)


def warm() -> bool:
    """Load (or compile) every serial kernel now, with the argument types the buffer calls them
    with, so that a run pays numba's start (about a second here: importing numba, starting LLVM,
    reading the on-disk cache) while it is built, as it pays loading the model, and not inside
    the first training step it times (issue #53). True when the compiled kernels are in use."""
    kernels = compiled()
    if kernels is None:
        return False
    i32, i64 = np.int32, np.int64
    lengths, offsets = np.ones(2, i64), np.array([0, 1], i64)
    shares = np.zeros(2, np.bool_)
    block = np.zeros(6, i32)  # an arena slice
    for frozen in (True, False):  # a `RolloutBatch`'s arrays are read-only, numba types them apart
        group_ids, tokens = np.zeros(2, i64), np.ones(2, i32)
        group_ids.flags.writeable = tokens.flags.writeable = not frozen
        kernels.shares(group_ids, lengths, tokens, shares)  # layout.shares_previous_prompt
        kernels.scatter(block, shares, lengths, lengths, tokens, tokens, tokens)  # scatter_rows
    kernels.count(np.zeros(2, i32), offsets)  # gather.increment: times_sampled
    ids, bits = np.empty((2, 2), i32), np.empty((2, 2), i32)  # PinnedRows.gather
    attention, loss = np.empty((2, 2), np.bool_), np.empty((2, 2), np.bool_)
    p_len = np.ones(2, i32)
    kernels.gather_rows(
        block, offsets * 3, offsets * 3 + 1, p_len, p_len, 0, ids, bits, attention, loss
    )
    return True


def compiled() -> Kernels | None:
    """The compiled kernels, or None where the numpy paths are to be used."""
    if _backend == "numpy":
        return None
    return _load()


def _load() -> Kernels | None:
    global _kernels, _kernel_failed
    if _kernels is None and not _kernel_failed:
        try:
            import numba
        except ImportError:
            _kernel_failed = True
            return None
        global _copy_row, prange
        jit = numba.njit(cache=True, nogil=True)
        _copy_row = jit(_copy_row)  # the gathers call it by its global name
        prange = numba.prange
        _kernels = Kernels(
            gather_rows=jit(_gather_rows),
            scatter=jit(_scatter),
            count=jit(_count),
            shares=jit(_shares),
        )
    return _kernels


def _gather_rows(
    arena: Any,
    prompt_offset: Any,
    completion_offset: Any,
    prompt_len: Any,
    completion_len: Any,
    pad_id: int,
    ids: Any,
    bits: Any,
    attention: Any,
    loss: Any,
) -> int:  # pragma: no cover - compiled by numba; checked against the numpy path in the tests
    n_rows = len(prompt_offset)
    # Read one unit of each segment first: the reads are independent, so the CPU overlaps their
    # cache and TLB misses instead of meeting them one row at a time inside the copy loop. The
    # sum is returned only so that the compiler keeps the reads.
    last = len(arena) - 1
    touched = 0
    for b in range(n_rows):
        completion = completion_offset[b]
        touched += arena[min(prompt_offset[b], last)] + arena[min(completion, last)]
        touched += arena[min(completion + completion_len[b], last)]
    for b in range(n_rows):
        _copy_row(
            arena,
            prompt_offset,
            completion_offset,
            prompt_len,
            completion_len,
            pad_id,
            ids,
            bits,
            attention,
            loss,
            b,
        )
    return touched


def _gather_rows_parallel(
    arena: Any,
    prompt_offset: Any,
    completion_offset: Any,
    prompt_len: Any,
    completion_len: Any,
    pad_id: int,
    ids: Any,
    bits: Any,
    attention: Any,
    loss: Any,
) -> int:  # pragma: no cover - compiled by numba; checked against the numpy path in the tests
    for b in prange(len(prompt_offset)):  # threads overlap the misses; no touching pass
        _copy_row(
            arena,
            prompt_offset,
            completion_offset,
            prompt_len,
            completion_len,
            pad_id,
            ids,
            bits,
            attention,
            loss,
            b,
        )
    return 0


def _copy_row(
    arena: Any,
    prompt_offset: Any,
    completion_offset: Any,
    prompt_len: Any,
    completion_len: Any,
    pad_id: int,
    ids: Any,
    bits: Any,
    attention: Any,
    loss: Any,
    b: int,
) -> None:  # pragma: no cover - compiled by numba
    prompt = prompt_offset[b]
    completion = completion_offset[b]
    p = prompt_len[b]
    c = completion_len[b]
    n = p + c
    ids[b, :p] = arena[prompt : prompt + p]
    ids[b, p:n] = arena[completion : completion + c]
    ids[b, n:] = pad_id
    attention[b, :n] = True
    attention[b, n:] = False
    bits[b, :p] = 0
    bits[b, p:n] = arena[completion + c : completion + 2 * c]
    bits[b, n:] = 0
    loss[b, :p] = False
    loss[b, p:n] = True
    loss[b, n:] = False


def _scatter(
    block: Any, shares: Any, p_len: Any, c_len: Any, prompts: Any, completions: Any, bits: Any
) -> None:  # pragma: no cover - compiled by numba; checked against the numpy path in the tests
    dst = 0
    src_p = 0
    src_c = 0
    for i in range(len(p_len)):
        p = p_len[i]
        c = c_len[i]
        if not shares[i]:
            block[dst : dst + p] = prompts[src_p : src_p + p]
            dst += p
        block[dst : dst + c] = completions[src_c : src_c + c]
        block[dst + c : dst + 2 * c] = bits[src_c : src_c + c]
        dst += 2 * c
        src_p += p
        src_c += c


def _shares(
    group_ids: Any, prompt_len: Any, prompts: Any, shares: Any
) -> None:  # pragma: no cover - compiled by numba; checked against the numpy path in the tests
    start = 0
    for i in range(len(prompt_len)):
        p = prompt_len[i]
        if i > 0 and group_ids[i] == group_ids[i - 1] and p == prompt_len[i - 1]:
            same = True
            for t in range(p):
                if prompts[start + t] != prompts[start - p + t]:
                    same = False
                    break
            shares[i] = same
        start += p


def _count(counter: Any, slots: Any) -> None:  # pragma: no cover - compiled by numba
    for slot in slots:
        counter[slot] += 1
