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
`fast` extra (numba), a compiled kernel (`buffer.kernels`) writes every output element once,
copying and masking in the same pass; `buffer.kernels.set_gather_backend` chooses.

The same switch chooses how an insert writes its rows into the arena (`scatter_rows`): numpy
scatters through per-token index arrays, the compiled kernel copies each row's segments (prompt
unless shared with the group's previous row, completion, log-prob bits) as slices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.kernels import compiled, gather_rows
from llm_replay.buffer.layout import exclusive_cumsum, stored_units

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
        if compiled() is not None:
            n = len(p)  # the kernel writes every element, padding included
            ids = np.empty((n, width), dtype=np.int32)
            bits = np.empty((n, width), dtype=np.int32)
            attention = np.empty((n, width), dtype=np.bool_)
            loss = np.empty((n, width), dtype=np.bool_)
            gather_rows(
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
    kernels = compiled()
    if kernels is not None:
        kernels.scatter(block, shares, p_len, c_len, prompt_ids, completion_ids, logprob_bits)
        return
    from llm_replay.data.batch import concat_ranges

    seg_p = exclusive_cumsum(stored_units(shares, p_len, c_len))
    seg_c = seg_p + np.where(shares, 0, p_len)
    lead = ~shares
    src_p = exclusive_cumsum(p_len.astype(np.int64))
    block[concat_ranges(seg_p[lead], p_len[lead])] = prompt_ids[
        concat_ranges(src_p[lead], p_len[lead])
    ]
    block[concat_ranges(seg_c, c_len)] = completion_ids
    block[concat_ranges(seg_c + c_len, c_len)] = logprob_bits


def increment(counter: npt.NDArray[np.int32], slots: I64) -> None:
    """counter[slots] += 1, counting a slot that repeats once per occurrence."""
    kernels = compiled()
    if kernels is not None:
        kernels.count(counter, slots)
        return
    ordered = np.sort(slots)
    if len(ordered) < 2 or bool((ordered[1:] != ordered[:-1]).all()):
        counter[slots] += 1  # no repeats: the fast buffered form is exact
    else:
        np.add.at(counter, slots, 1)
