"""The compiled kernels (numba, the optional `fast` extra) and the switch that chooses them.

The buffer's hot loops (the padded gather, the arena scatter of an insert, the prompt-sharing
check, reuse counting) have a numpy path everywhere they are used and a compiled one here. This
module owns loading numba, so that every module needing a kernel imports it from one place below
them all (`gather`, `layout` and `table` use it; it imports nothing of llm_replay).

`LLM_REPLAY_GATHER=numpy` (or `set_gather_backend("numpy")`) forces the numpy paths; "auto", the
default, uses the kernels when numba imports; "numba" requires them. The kernels are written in
plain Python below and compiled on first use (cached on disk by numba); tests check each against
its numpy path.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
        jit = numba.njit(cache=True, nogil=True)
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
    return touched


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
