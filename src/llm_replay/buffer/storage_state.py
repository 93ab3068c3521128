"""Saving and rebuilding a `RolloutStorage`'s state: what a checkpoint or snapshot holds.

The saved state is layout-free: rollouts whole, in insertion order, with every per-slot column but
the arena offsets. Loading checks it (`state_check`), lays the rows out again (prompts shared per
group, `layout`) and rebuilds the order queue, the dense list and the counters, so a loaded table
is the saved one exactly, compacted. Functions take the storage as `self` to read like its methods.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_replay.buffer import layout
from llm_replay.buffer.arena import guard_for
from llm_replay.buffer.gather import scatter_rows
from llm_replay.buffer.state_check import check_storage_state
from llm_replay.data.columns import ROW_COLUMNS

LAYOUT_COLUMNS = ("prompt_offset", "completion_offset")
"""Where each row sits in the arena: rebuilt on load, never saved."""

COLUMNS: dict[str, Any] = {
    "prompt_offset": np.int64,
    "completion_offset": np.int64,
    "prompt_len": np.int32,
    "completion_len": np.int32,
    "insert_version": np.int64,
    "seq": np.int64,
    "times_sampled": np.int32,
    "epoch": np.int32,
    "task_code": np.int16,
    **{column.field: column.dtype for column in ROW_COLUMNS},
}
OPTIONAL_COLUMNS = {column.field: column.default for column in ROW_COLUMNS if column.added}
"""Columns a state saved before they existed may lack, with the value they load as."""


def state_arrays(self: Any) -> dict[str, np.ndarray]:
    """Everything needed to rebuild this storage exactly (arena compacted)."""
    ordered = self.live_in_order()
    batch = self.gather_batch(ordered)
    used = self._fresh_slot
    arrays: dict[str, np.ndarray] = {
        "slots_in_order": ordered,
        "prompt_ids": batch.prompt_ids,
        "completion_ids": batch.completion_ids,
        "behaviour_logprobs": batch.behaviour_logprobs,
        "dense": self.dense[: self.size].copy(),
        "free": np.asarray(self._free, dtype=np.int64),
    }
    for name in COLUMNS:
        if name not in LAYOUT_COLUMNS:
            arrays[f"col_{name}"] = getattr(self, name)[:used].copy()
    return arrays


def state_meta(self: Any) -> dict[str, Any]:
    return {
        "capacity": self.capacity,
        "fresh_slot": self._fresh_slot,
        "next_seq": self._next_seq,
        "oldest_seq": self._oldest_seq,
        "task_names": list(self.task_names),
        "arena_units": self.data_units,
        "added": [self.rollouts_added, self.units_added, self.tokens_added],
    }


def load_state(self: Any, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Rebuild `self` (a `RolloutStorage`) from a saved state, prompts re-shared."""
    saved = meta.get("fresh_slot")
    if isinstance(saved, int) and not isinstance(saved, bool) and 0 <= saved <= self.capacity:
        for name, value in OPTIONAL_COLUMNS.items():
            if f"col_{name}" not in arrays:
                arrays = {**arrays, f"col_{name}": np.full(saved, value, dtype=COLUMNS[name])}
    check_storage_state(self.capacity, meta, arrays, COLUMNS, LAYOUT_COLUMNS)
    used = int(meta["fresh_slot"])
    for name in COLUMNS:
        if name not in LAYOUT_COLUMNS:
            getattr(self, name)[:used] = arrays[f"col_{name}"]
    ordered = arrays["slots_in_order"].astype(np.int64)
    p = self.prompt_len[ordered].astype(np.int64)
    c = self.completion_len[ordered].astype(np.int64)
    prompt_ids = arrays["prompt_ids"]
    shares = layout.shares_previous_prompt(self.group_id[ordered], p, prompt_ids)
    units = layout.stored_units(shares, p, c)
    total = int(units.sum())
    self.max_len = int(max(self.max_len, (p + c).max(initial=0)))
    units_ = max(int(meta["arena_units"]), total, 16)
    self._set_arena(self.arena_store.new(units_ + guard_for(self.max_len)))
    starts = layout.exclusive_cumsum(units)
    self.prompt_offset[ordered], self.completion_offset[ordered] = layout.row_offsets(
        shares, p, starts
    )
    logprobs = arrays["behaviour_logprobs"].view(np.float32)
    scatter_rows(self.arena[:total], shares, p, c, prompt_ids, arrays["completion_ids"], logprobs)
    self.arena_store.touched(4 * total)
    self.head = total
    self.live[:] = False
    self.live[ordered] = True
    self.size = len(ordered)
    self.dense[: self.size] = arrays["dense"]
    self.dense_pos[self.dense[: self.size]] = np.arange(self.size, dtype=np.int32)
    self._free = arrays["free"].astype(np.int64).tolist()
    self._fresh_slot = used
    self.rollouts_added, self.units_added, self.tokens_added = (int(x) for x in meta["added"])
    self._next_seq = int(meta["next_seq"])
    self._oldest_seq = int(meta["oldest_seq"])
    self._order[:] = 0
    self._order[self.seq[ordered] % len(self._order)] = ordered
    self.live_units = int((p + 2 * c).sum())
    self.num_tokens = int(p.sum() + c.sum())
    self.task_names = list(meta["task_names"])
