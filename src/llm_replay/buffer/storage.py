"""Rollout storage: per-slot columns plus one ring arena for all variable-length payload.

Why this layout. A replay table for LLM rollouts holds millions of variable-length token sequences.
Per-rollout Python objects (or tensors padded to the longest completion) cost 2-10x the payload and
make sampling a Python loop. Here every rollout's payload lives contiguously in one int32 arena as
``[prompt ids (P) | completion ids (C) | behaviour log-probs as float32 bits (C)]``, so the memory is
the raw payload (4P + 8C bytes) plus ~100 bytes of fixed per-slot columns, and a padded,
learner-ready batch is gathered with a few vectorised numpy operations. Rows of a group that
arrive together store their prompt once (`buffer/layout.py`): 4P/G + 8C bytes a rollout.

The arena is a ring written in insertion order. Oldest-first eviction (capacity, max age) frees
space at the ring's tail; other evictions leave holes that are reclaimed when the tail passes them
or when the arena is linearised. The arena never forces an eviction: when a rollout does not fit
it grows (to the projected steady-state size, from the table's capacity and the mean rollout size
seen so far) or compacts. Slots are recycled from a free list; a stable key is
``epoch * capacity + slot`` so a key names one rollout forever and maps to its slot by arithmetic.

Growth and compaction copy under the table's lock; padded batches are copied outside it, from
pinned rows (`buffer/gather.py`). The arena is in RAM or memory-mapped from disk (`buffer/arena.py`).
The per-slot columns and the saved state are in `buffer/storage_state.py`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer import arena as sizing
from llm_replay.buffer import layout, storage_state
from llm_replay.buffer.arena import MemoryArena, guard_for
from llm_replay.buffer.gather import PinnedRows, scatter_rows
from llm_replay.buffer.storage_state import COLUMNS
from llm_replay.data.batch import RolloutBatch, concat_ranges
from llm_replay.data.columns import ROW_COLUMNS

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


class RolloutStorage:
    """Fixed-capacity slot columns and a growable ring arena; no locking (the table locks)."""

    def __init__(
        self,
        capacity: int,
        *,
        max_tokens: int | None = None,
        max_bytes: int | None = None,
        initial_units: int = 1 << 16,
        arena: MemoryArena | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity = {capacity}: must be >= 1")
        self.capacity = capacity
        self.arena_store = arena if arena is not None else MemoryArena()
        self.max_tokens = max_tokens
        self.max_bytes = max_bytes
        # Everything ever added, to project the arena's steady-state size.
        self.rollouts_added = 0
        self.units_added = 0
        self.tokens_added = 0
        for name, dtype in COLUMNS.items():
            setattr(self, name, np.zeros(capacity, dtype=dtype))
        self.prompt_offset: I64
        self.completion_offset: I64
        self.prompt_len: I32
        self.completion_len: I32
        self.reward: npt.NDArray[np.float64]
        self.advantage: npt.NDArray[np.float64]
        self.group_id: I64
        self.policy_version: I64
        self.insert_version: I64
        self.seq: I64
        self.times_sampled: I32
        self.epoch: I32
        self.correct: npt.NDArray[np.int8]
        self.finish_reason: npt.NDArray[np.uint8]
        self.task_code: npt.NDArray[np.int16]
        self.reward_version: I64
        self.reference_logprob: npt.NDArray[np.float64]
        self.annotator: npt.NDArray[np.uint8]
        self.annotation_cost: npt.NDArray[np.float64]
        self.live = np.zeros(capacity, dtype=bool)
        # Dense list of live slots (uniform sampling, scans) with each slot's position in it.
        self.dense = np.zeros(capacity, dtype=np.int32)
        self.dense_pos = np.zeros(capacity, dtype=np.int32)
        self.size = 0
        # Slots never used yet are handed out in order; freed slots are reused LIFO.
        self._fresh_slot = 0
        self._free: list[int] = []
        # Insertion-order queue: order[seq % len(order)] = slot, valid while seq[slot] == seq.
        self._order = np.zeros(max(2 * capacity, 16), dtype=np.int32)
        self._next_seq = 0
        self._oldest_seq = 0
        # The arena ring.
        self.max_len = 0  # longest rollout (prompt + completion tokens) ever stored
        if max_bytes is not None:  # never start above what the byte bound lets the arena hold
            initial_units = min(
                initial_units, int(max_bytes * sizing.HEADROOM) // sizing.UNIT_BYTES + 1
            )
        self._set_arena(self.arena_store.new(max(int(initial_units), 16) + guard_for(0)))
        self.head = 0
        self.live_units = 0
        self.num_tokens = 0
        self.task_names: list[str] = [""]
        self._pins: dict[int, PinnedRows] = {}
        self._next_pin = 0

    # ----------------------------------------------------------------- keys
    def keys_of(self, slots: npt.ArrayLike) -> I64:
        s = np.asarray(slots, dtype=np.int64)
        return self.epoch[s].astype(np.int64) * self.capacity + s

    def slots_of(self, keys: npt.ArrayLike) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Slots for `keys` and a mask of which keys name a live rollout."""
        k = np.asarray(keys, dtype=np.int64)
        slots = np.mod(k, self.capacity)
        found = (
            (k >= 0) & self.live[slots] & (self.epoch[slots].astype(np.int64) == k // self.capacity)
        )
        return slots, found

    # ----------------------------------------------------------------- order
    def oldest(self, count: int) -> I64:
        """Up to `count` live slots, oldest first."""
        out: list[I64] = []
        need = count
        seq = self._oldest_seq
        window = max(count, 64)
        length = len(self._order)
        while need > 0 and seq < self._next_seq:
            stop = min(self._next_seq, seq + window)
            seqs = np.arange(seq, stop, dtype=np.int64)
            cand = self._order[seqs % length].astype(np.int64)
            valid = self.live[cand] & (self.seq[cand] == seqs)
            picked = cand[valid][:need]
            out.append(picked)
            need -= len(picked)
            if seq == self._oldest_seq and not valid.any():
                self._oldest_seq = stop  # nothing live in this window: skip it for good
            elif seq == self._oldest_seq:
                self._oldest_seq = int(seqs[int(np.argmax(valid))])
            seq = stop
            window *= 2
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def live_slots(self) -> I64:
        return self.dense[: self.size].astype(np.int64)

    def live_in_order(self) -> I64:
        slots = self.live_slots()
        return slots[np.argsort(self.seq[slots], kind="stable")]

    # ----------------------------------------------------------------- insert
    def add(self, batch: RolloutBatch, insert_version: int) -> I64:
        """Store `batch` (caller guarantees free slots); returns the new slots."""
        n = len(batch)
        if n > self.capacity - self.size:
            raise RuntimeError("storage over capacity (the table must evict first)")
        slots = self._take_slots(n)
        p_len = batch.prompt_lengths.astype(np.int64)
        c_len = batch.completion_lengths.astype(np.int64)
        shares = layout.shares_previous_prompt(batch.group_ids, p_len, batch.prompt_ids)
        units = layout.stored_units(shares, p_len, c_len)
        self.rollouts_added += n
        self.units_added += int(units.sum())
        self.tokens_added += int(p_len.sum() + c_len.sum())
        longest = int((p_len + c_len).max())
        if longest > self.max_len:
            self.max_len = longest
            if longest > len(self.arena) - self.data_units:
                self._relayout(0, force=True)
        starts = self._allocate(units)
        self._write_payload(batch, shares, p_len, c_len, int(starts[0]), int(units.sum()))

        codes = np.array([self._task_code(name) for name in batch.task_names], dtype=np.int16)
        self.prompt_offset[slots], self.completion_offset[slots] = layout.row_offsets(
            shares, p_len, starts
        )
        self.prompt_len[slots] = batch.prompt_lengths
        self.completion_len[slots] = batch.completion_lengths
        for column in ROW_COLUMNS:
            getattr(self, column.field)[slots] = getattr(batch, column.name)
        self.insert_version[slots] = insert_version
        self.times_sampled[slots] = 0
        self.task_code[slots] = codes[batch.task_codes]
        self._enqueue(slots)
        self.live[slots] = True
        self.dense[self.size : self.size + n] = slots
        self.dense_pos[slots] = np.arange(self.size, self.size + n, dtype=np.int32)
        self.size += n
        self.live_units += int((p_len + 2 * c_len).sum())
        self.num_tokens += int(p_len.sum() + c_len.sum())
        return slots

    def _task_code(self, name: str) -> int:
        try:
            return self.task_names.index(name)
        except ValueError:
            if len(self.task_names) >= np.iinfo(np.int16).max:
                raise ValueError("more than 32767 distinct task names in one table") from None
            self.task_names.append(name)
            return len(self.task_names) - 1

    def _take_slots(self, n: int) -> I64:
        from_free = min(n, len(self._free))
        reused = [self._free.pop() for _ in range(from_free)]
        fresh = np.arange(self._fresh_slot, self._fresh_slot + n - from_free, dtype=np.int64)
        self._fresh_slot += n - from_free
        return np.concatenate((np.asarray(reused, dtype=np.int64), fresh))

    def _enqueue(self, slots: I64) -> None:
        n = len(slots)
        if self._next_seq + n - self._oldest_seq > len(self._order):
            self._renumber()
        seqs = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self.seq[slots] = seqs
        self._order[seqs % len(self._order)] = slots
        self._next_seq += n

    def _renumber(self) -> None:
        """Compact the order queue when dead entries fill it (rare): relative order is kept."""
        ordered = self.live_in_order()
        self.seq[ordered] = np.arange(len(ordered), dtype=np.int64)
        self._order[: len(ordered)] = ordered
        self._oldest_seq = 0
        self._next_seq = len(ordered)

    # ----------------------------------------------------------------- arena
    def projected_units(self) -> float:
        """Arena units held at capacity, from the mean rollout added so far."""
        projected = self.units_added / max(1, self.rollouts_added) * self.capacity
        if self.max_tokens is not None and self.tokens_added:
            projected = min(projected, self.max_tokens * self.units_added / self.tokens_added)
        if self.max_bytes is not None:
            projected = min(projected, self.max_bytes / sizing.UNIT_BYTES)
        return projected

    def _allocate(self, units: I64) -> I64:
        """Ring offsets for consecutive rollouts of `units` each; grows/compacts if needed."""
        total = int(units.sum())
        if not self._fits_contiguously(total):
            self._relayout(total)
        if self.head + total > self.data_units:
            self.head = 0  # wrap; `_fits_contiguously` checked [0, tail) has room
        starts = np.empty(len(units), dtype=np.int64)
        starts[0] = self.head
        np.cumsum(units[:-1], out=starts[1:])
        starts[1:] += self.head
        self.head += total
        return starts

    def _fits_contiguously(self, total: int) -> bool:
        pinned = self._pinned_starts()
        if self.size == 0 and not len(pinned):
            self.head = 0
            return total <= self.data_units
        oldest = self.oldest(1)
        bounds = pinned if self.size == 0 else np.append(pinned, self.prompt_offset[oldest[0]])
        # The tail is the occupied offset that comes first going forward from the head.
        tail = int(bounds[np.argmin((bounds - self.head) % self.data_units)])
        if tail < self.head:  # live span [tail, head): free at the end, then [0, tail)
            return self.head + total <= self.data_units or total <= tail
        return self.head + total <= tail  # wrapped: free is [head, tail)

    def _relayout(self, incoming: int, force: bool = False) -> None:
        """Copy live payload, oldest first, to the front of a (possibly larger) arena."""
        ordered = self.live_in_order()
        sources, lengths, destinations, prompt_offset, completion_offset = layout.compacted(
            self.prompt_offset[ordered],
            self.completion_offset[ordered],
            self.prompt_len[ordered].astype(np.int64),
            self.completion_len[ordered].astype(np.int64),
        )
        held = int(lengths.sum())
        needed = held + incoming
        size = self.data_units
        if needed > 0.9 * size and not force:  # compacting alone would leave too little room: grow
            projected = self.projected_units() * sizing.HEADROOM
            size = max(
                int(needed * sizing.GROWTH), int(min(projected, needed * sizing.MAX_GROWTH_STEP))
            )
        new = self.arena_store.new(size + guard_for(self.max_len), zeroed=False)
        for src, dst, span in layout.contiguous_runs(sources, lengths, destinations):
            for at in range(0, span, sizing.COPY_UNITS):  # bounded pages held at once
                n = min(sizing.COPY_UNITS, span - at)
                new[dst + at : dst + at + n] = self.arena[src + at : src + at + n]
                self.arena_store.touched(8 * n)  # read and written
        self.prompt_offset[ordered] = prompt_offset
        self.completion_offset[ordered] = completion_offset
        self.head = held
        self._set_arena(new)

    def _write_payload(
        self, batch: RolloutBatch, shares: Any, p_len: I64, c_len: I64, start: int, units: int
    ) -> None:
        """Write the batch's rows into the block `_allocate` gave (`buffer.layout`)."""
        block = self.arena[start : start + units]
        b = batch
        scatter_rows(
            block, shares, p_len, c_len, b.prompt_ids, b.completion_ids, b.behaviour_logprobs
        )
        self.arena_store.touched(block.nbytes)

    # ----------------------------------------------------------------- remove
    def remove(self, slots: I64) -> None:
        """Free `slots` (unique, live)."""
        if len(slots) == 0:
            return
        self.live[slots] = False
        units = self.prompt_len[slots].astype(np.int64) + 2 * self.completion_len[slots]
        self.live_units -= int(units.sum())
        self.num_tokens -= int(
            (self.prompt_len[slots].astype(np.int64) + self.completion_len[slots]).sum()
        )
        # Dense list: holes below the new size are filled by survivors from above it.
        new_size = self.size - len(slots)
        pos = self.dense_pos[slots]
        holes = np.sort(pos[pos < new_size])
        tail = self.dense[new_size : self.size]
        movers = tail[self.live[tail]]
        self.dense[holes] = movers
        self.dense_pos[movers] = holes.astype(np.int32)
        self.size = new_size
        self.epoch[slots] += 1
        self._free.extend(slots.tolist())
        if self.size == 0:
            self.head = 0
            self._oldest_seq = self._next_seq

    # ----------------------------------------------------------------- gather
    def _set_arena(self, arena: I32) -> None:
        """Install a new arena buffer and the views that read it."""
        self.arena = arena
        self.data_units = len(arena) - guard_for(self.max_len)
        width = len(arena) - self.data_units  # the guard, always >= max_len
        # prefix[k, :T] for a row starting at (width - k): k ones then zeros (a mask of length k).
        self._prefix = np.concatenate((np.ones(width, bool), np.zeros(width, bool)))
        self._prefix_width = width

    def rows(self, slots: I64) -> PinnedRows:
        """What a padded gather of `slots` reads, valid while the arena is not rewritten."""
        return PinnedRows(
            self.arena,
            self._prefix,
            self._prefix_width,
            self.prompt_offset[slots],
            self.completion_offset[slots],
            self.prompt_len[slots],
            self.completion_len[slots],
        )

    def gather_padded(
        self, slots: I64, pad_id: int = 0
    ) -> tuple[I32, npt.NDArray[np.float32], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Learner-ready, right-padded arrays for `slots` (see `PinnedRows.gather`)."""
        return self.rows(slots).gather(pad_id)

    def pin(self, slots: I64) -> tuple[int, PinnedRows]:
        """Rows of `slots` that no insert overwrites until `unpin(token)`."""
        rows = self.rows(slots)
        token = self._next_pin
        self._next_pin += 1
        self._pins[token] = rows
        return token, rows

    def unpin(self, token: int) -> None:
        del self._pins[token]

    def _pinned_starts(self) -> I64:
        """Offsets of pinned rows in the current arena (pins of a replaced arena bind nothing)."""
        starts = [rows.prompt_offset for rows in self._pins.values() if rows.arena is self.arena]
        return np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)

    def gather_batch(self, slots: I64) -> RolloutBatch:
        """The stored rollouts at `slots` as a columnar batch (for checkpoints and mixtures)."""
        p = self.prompt_len[slots].astype(np.int64)
        c = self.completion_len[slots].astype(np.int64)
        completion = self.completion_offset[slots]
        return RolloutBatch(
            prompt_ids=self.arena[concat_ranges(self.prompt_offset[slots], p)],
            prompt_lengths=self.prompt_len[slots].copy(),
            completion_ids=self.arena[concat_ranges(completion, c)],
            completion_lengths=self.completion_len[slots].copy(),
            behaviour_logprobs=self.arena[concat_ranges(completion + c, c)].view(np.float32),
            task_codes=self.task_code[slots].copy(),
            task_names=tuple(self.task_names),
            allow_empty=True,
            **{c.name: getattr(self, c.field)[slots].copy() for c in ROW_COLUMNS},
        )

    # ----------------------------------------------------------------- accounting
    @property
    def nbytes(self) -> int:
        """Bytes held by the storage's arrays (arena capacity included, even on disk)."""
        arrays = [getattr(self, name) for name in COLUMNS]
        arrays += [self.live, self.dense, self.dense_pos, self._order, self.arena]
        return int(sum(a.nbytes for a in arrays))

    @property
    def payload_nbytes(self) -> int:
        """Raw payload of the live rollouts: token ids (4 B) + completion log-probs (4 B), each
        rollout counted with its own prompt (what `max_bytes` bounds)."""
        return sizing.UNIT_BYTES * self.live_units

    def stored_nbytes(self) -> int:
        """Payload bytes the arena actually holds for the live rollouts: `payload_nbytes` less
        the prompts that rows of a group share (`buffer.layout`). O(size): for reports."""
        slots = self.live_slots()
        distinct = np.unique(self.prompt_offset[slots], return_index=True)[1]
        units = 2 * self.completion_len[slots].astype(np.int64).sum()
        units += self.prompt_len[slots[distinct]].astype(np.int64).sum()
        return sizing.UNIT_BYTES * int(units)

    def rollout_tokens(self, slots: I64) -> I64:
        """Prompt + completion tokens of each stored rollout at `slots`."""
        return self.prompt_len[slots].astype(np.int64) + self.completion_len[slots]

    def rollout_nbytes(self, slots: I64) -> I64:
        """Payload bytes of each stored rollout at `slots` (what `max_bytes` bounds)."""
        return sizing.UNIT_BYTES * (self.rollout_tokens(slots) + self.completion_len[slots])

    # ----------------------------------------------------------------- state
    def state_arrays(self) -> dict[str, np.ndarray]:
        """Everything needed to rebuild this storage exactly (arena compacted)."""
        return storage_state.state_arrays(self)

    def state_meta(self) -> dict[str, Any]:
        return storage_state.state_meta(self)

    def load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        storage_state.load_state(self, meta, arrays)
