"""Padded batches gathered from the arena, outside the table's lock.

A learner's batch is the largest copy a table makes (B rows of the widest rollout, ids and
log-probs). Holding the table lock for it would block every insert of every generation worker for
the duration. So the table reads what it needs under the lock (the arena buffer and each row's
offset and lengths), registers those rows as pinned, releases the lock, copies, and unpins.

Why a pin is enough: the arena is a ring and inserts only ever write the free span between the
head and the tail. The storage counts a pinned row as occupied when it computes the tail, so a
rollout that is evicted while its copy is in flight is not overwritten until the copy is done.
A growth or compaction installs a new arena buffer and never writes the old one, which the pin
keeps alive, so it is safe too.

Two implementations give identical arrays. The numpy one copies each row as one contiguous window
of the arena, then masks with a second pass (numpy cannot fuse the two). With the optional
`fast` extra (numba), a compiled kernel writes every output element once, copying and masking in
the same pass; it is used when numba imports, unless `LLM_REPLAY_GATHER=numpy` (or
`set_gather_backend("numpy")`) asks for the fallback.

The same switch chooses how an insert writes its rows into the arena (`scatter_rows`): numpy
scatters through per-token index arrays, the compiled kernel copies each row's segments (prompt
unless shared with the group's previous row, completion, log-prob bits) as slices.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def row_windows(array: np.ndarray, width: int) -> np.ndarray:
    """A [len(array) - width + 1, width] view whose row r is array[r : r + width] (no copy)."""
    stride = array.strides[0]
    return np.ndarray(
        shape=(len(array) - width + 1, width),
        dtype=array.dtype,
        buffer=array,
        strides=(stride, stride),
    )


@dataclass(frozen=True, eq=False)
class PinnedRows:
    """Rows of one arena buffer, read under the lock, copied without it."""

    arena: I32
    prefix: B  # `prefix_width` ones then as many zeros: mask rows are windows of it
    prefix_width: int
    prompt_offset: I64
    completion_offset: I64
    prompt_len: I32
    completion_len: I32

    def gather(self, pad_id: int = 0) -> tuple[I32, npt.NDArray[np.float32], B, B]:
        """Learner-ready, right-padded arrays.

        Returns input_ids [B, T] int32 (prompt then completion), behaviour_logprobs [B, T] float32
        (the log-prob of input_ids[b, t], 0 outside the completion), attention_mask [B, T] and
        loss_mask [B, T] (completion tokens) as bool, with T the longest rollout in the batch.

        A row that stores its own prompt (`buffer.layout`) is one contiguous window of the arena
        (the guard region after the ring keeps every window in bounds), so the gather is a row
        copy per rollout, not a per-token index; a row that shares its group's prompt takes its
        prompt columns from a second window. Masks are windows of a ones-then-zeros pattern.
        """
        p = self.prompt_len
        c = self.completion_len
        lengths = p + c
        width = int(lengths.max()) if len(p) else 0
        kernel = compiled_kernel()
        if kernel is not None:
            n = len(p)  # the kernel writes every element, padding included
            ids = np.empty((n, width), dtype=np.int32)
            bits = np.empty((n, width), dtype=np.int32)
            attention = np.empty((n, width), dtype=np.bool_)
            loss = np.empty((n, width), dtype=np.bool_)
            kernel(
                self.arena,
                self.prompt_offset,
                self.completion_offset,
                p,
                c,
                int(pad_id),
                ids,
                bits,
                attention,
                loss,
            )
            return ids, bits.view(np.float32), attention, loss
        windows = row_windows(self.arena, width)
        masks = row_windows(self.prefix, width)
        start = self.completion_offset - p  # column t reads start + t: the completion from P on
        ids = windows[start]
        followers = np.flatnonzero(start != self.prompt_offset)
        if len(followers):
            prompt_part = masks[self.prefix_width - p[followers]]
            own_prompt = windows[self.prompt_offset[followers]]
            ids[followers] = np.where(prompt_part, own_prompt, ids[followers])
        logprob_bits = windows[start + c]  # log-prob of completion token j sits at C + j after it
        attention = masks[self.prefix_width - lengths]
        loss = attention ^ masks[self.prefix_width - p]
        if pad_id == 0:
            ids *= attention
        else:
            ids[~attention] = pad_id
        logprob_bits *= loss  # mask as integers: garbage bits may be NaN patterns
        return ids, logprob_bits.view(np.float32), attention, loss


def scatter_rows(
    block: I32,
    shares: B,
    p_len: I64,
    c_len: I64,
    prompt_ids: npt.ArrayLike,
    completion_ids: npt.ArrayLike,
    logprobs: npt.ArrayLike,
) -> None:
    """Write consecutive rows into `block` (an arena slice of exactly their stored units): each
    row's [prompt | completion | log-prob bits], without the prompt where `shares` says the row
    uses the previous row's (`buffer.layout`), from the batch's flat arrays."""
    if not len(p_len):
        return
    prompt_ids = np.ascontiguousarray(prompt_ids, dtype=np.int32)
    completion_ids = np.ascontiguousarray(completion_ids, dtype=np.int32)
    logprob_bits = np.ascontiguousarray(logprobs, dtype=np.float32).view(np.int32)
    kernel = compiled_kernel()
    if kernel is not None and _scatter_kernel is not None:
        _scatter_kernel(block, shares, p_len, c_len, prompt_ids, completion_ids, logprob_bits)
        return
    from llm_replay.rollout import concat_ranges

    own = np.where(shares, 0, p_len).astype(np.int64)  # prompt units each row stores
    seg_p = np.concatenate(([0], np.cumsum(own + 2 * c_len)[:-1])).astype(np.int64)
    seg_c = seg_p + own
    lead = ~shares
    src_p = np.concatenate(([0], np.cumsum(p_len)[:-1])).astype(np.int64)
    block[concat_ranges(seg_p[lead], p_len[lead])] = prompt_ids[
        concat_ranges(src_p[lead], p_len[lead])
    ]
    block[concat_ranges(seg_c, c_len)] = completion_ids
    block[concat_ranges(seg_c + c_len, c_len)] = logprob_bits


BACKENDS = ("auto", "numba", "numpy")
_backend = os.environ.get("LLM_REPLAY_GATHER", "auto")
_kernel: Callable[..., None] | None = None
_scatter_kernel: Callable[..., None] | None = None
_count_kernel: Callable[..., None] | None = None
_share_kernel: Callable[..., None] | None = None
_kernel_failed = False


def set_gather_backend(name: str) -> None:
    """ "auto" (numba when it imports, else numpy), "numba" (required) or "numpy"."""
    global _backend
    if name not in BACKENDS:
        raise ValueError(f"gather backend = {name!r}: choose one of {BACKENDS}")
    if name == "numba" and _load_kernel() is None:
        raise ValueError(
            "gather backend = 'numba': numba is not installed (pip install 'llm-replay[fast]')"
        )
    _backend = name


def gather_backend() -> str:
    """The backend `gather` uses now: "numba" or "numpy"."""
    return "numba" if compiled_kernel() is not None else "numpy"


def compiled_kernel() -> Callable[..., None] | None:
    if _backend == "numpy":
        return None
    return _load_kernel()


def compiled_share_kernel() -> Callable[..., None] | None:
    """The compiled `buffer.layout.shares_previous_prompt`, or None for the numpy path."""
    return _share_kernel if compiled_kernel() is not None else None


def _load_kernel() -> Callable[..., None] | None:
    global _kernel, _scatter_kernel, _count_kernel, _share_kernel, _kernel_failed
    if _kernel is None and not _kernel_failed:
        try:
            import numba
        except ImportError:
            _kernel_failed = True
            return None
        _kernel = numba.njit(cache=True, nogil=True)(_gather_rows)
        _scatter_kernel = numba.njit(cache=True, nogil=True)(_scatter)
        _count_kernel = numba.njit(cache=True, nogil=True)(_count)
        _share_kernel = numba.njit(cache=True, nogil=True)(_shares)
    return _kernel


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
) -> None:  # pragma: no cover - compiled by numba; checked against the numpy path in the tests
    for b in range(len(prompt_offset)):
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


def increment(counter: npt.NDArray[np.int32], slots: I64) -> None:
    """counter[slots] += 1, counting a slot that repeats once per occurrence."""
    if compiled_kernel() is not None and _count_kernel is not None:
        _count_kernel(counter, slots)
        return
    ordered = np.sort(slots)
    if len(ordered) < 2 or bool((ordered[1:] != ordered[:-1]).all()):
        counter[slots] += 1  # no repeats: the fast buffered form is exact
    else:
        np.add.at(counter, slots, 1)
