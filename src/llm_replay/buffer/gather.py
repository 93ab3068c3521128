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
"""

from __future__ import annotations

from dataclasses import dataclass

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
    offset: I64
    prompt_len: I32
    completion_len: I32

    def gather(self, pad_id: int = 0) -> tuple[I32, npt.NDArray[np.float32], B, B]:
        """Learner-ready, right-padded arrays.

        Returns input_ids [B, T] int32 (prompt then completion), behaviour_logprobs [B, T] float32
        (the log-prob of input_ids[b, t], 0 outside the completion), attention_mask [B, T] and
        loss_mask [B, T] (completion tokens) as bool, with T the longest rollout in the batch.

        Each output row is one contiguous window of the arena (the guard region after the ring
        keeps every window in bounds), so the gather is a row copy per rollout, not a per-token
        index; masks are windows of a ones-then-zeros pattern.
        """
        p = self.prompt_len
        c = self.completion_len
        lengths = p + c
        width = int(lengths.max()) if len(p) else 0
        windows = row_windows(self.arena, width)
        ids = windows[self.offset]
        logprob_bits = windows[self.offset + c]  # log-prob of token t sits at offset + C + t
        masks = row_windows(self.prefix, width)
        attention = masks[self.prefix_width - lengths]
        loss = attention ^ masks[self.prefix_width - p]
        if pad_id == 0:
            ids *= attention
        else:
            ids[~attention] = pad_id
        logprob_bits *= loss  # mask as integers: garbage bits may be NaN patterns
        return ids, logprob_bits.view(np.float32), attention, loss
