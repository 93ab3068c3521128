"""Consistency checks of a saved storage state, run before a checkpoint is loaded into a table.

The checksums in a checkpoint's DONE list catch damaged bytes; these checks catch a state that is
well-formed JSON and arrays but does not describe a valid storage (crafted, or from a bug): slots
that are both live and free, payload sizes that do not match the lengths, codes out of range.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from llm_replay.data.rollout import ANNOTATORS, FINISH_REASONS


def check_storage_state(
    capacity: int,
    meta: dict[str, Any],
    arrays: dict[str, np.ndarray],
    columns: dict[str, Any],
    rebuilt: tuple[str, ...] = (),
) -> None:
    """Refuse (ValueError naming the entry) a saved state that does not describe a valid storage.
    `rebuilt`: columns the load recomputes, which a state does not carry."""

    def fail(name: str, why: str) -> NoReturn:
        raise ValueError(f"storage {name}: {why}")

    ints = ("capacity", "fresh_slot", "next_seq", "oldest_seq", "arena_units")
    for name in ints:
        if isinstance(meta.get(name), bool) or not isinstance(meta.get(name), int):
            fail(name, "must be an integer")
    if meta["capacity"] != capacity or not 0 <= meta["fresh_slot"] <= capacity:
        fail("capacity", f"{meta['capacity']}/{meta['fresh_slot']} do not fit {capacity} slots")
    if not 0 <= meta["oldest_seq"] <= meta["next_seq"] or meta["arena_units"] < 0:
        fail("next_seq", "sequence counters out of order")
    names = meta.get("task_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        fail("task_names", "must be a non-empty list of strings")
    added = meta.get("added")
    if not (isinstance(added, list) and len(added) == 3 and all(isinstance(x, int) for x in added)):
        fail("added", "must be three integers")
    used = meta["fresh_slot"]
    for name, dtype in columns.items():
        if name in rebuilt:
            continue
        column = arrays.get(f"col_{name}")
        if column is None or column.dtype != dtype or column.shape != (used,):
            fail(f"col_{name}", f"must be {np.dtype(dtype)}[{used}]")
    for name in ("slots_in_order", "dense", "free"):
        array = arrays.get(name)
        if array is None or array.ndim != 1 or array.dtype.kind not in "iu":
            fail(name, "must be a 1-D integer array")
    ordered = arrays["slots_in_order"].astype(np.int64)
    everything = np.concatenate((ordered, arrays["free"].astype(np.int64)))
    if not np.array_equal(np.sort(everything), np.arange(used)):
        fail("slots_in_order", "live and free slots must partition the used slots")
    if not np.array_equal(np.sort(arrays["dense"].astype(np.int64)), np.sort(ordered)):
        fail("dense", "must list exactly the live slots")
    p = arrays["col_prompt_len"][ordered].astype(np.int64)
    c = arrays["col_completion_len"][ordered].astype(np.int64)
    if len(ordered) and (p.min() < 1 or c.min() < 0):
        fail("col_prompt_len", "lengths out of range")
    payload = {"prompt_ids": int(p.sum()), "completion_ids": int(c.sum())}
    payload["behaviour_logprobs"] = payload["completion_ids"]
    for name, size in payload.items():
        array = arrays.get(name)
        if array is None or array.ndim != 1 or array.size != size or array.dtype.itemsize != 4:
            fail(name, f"must hold {size} 4-byte values")
    seqs = arrays["col_seq"][ordered]
    if len(ordered) and (
        seqs.min() < meta["oldest_seq"]
        or seqs.max() >= meta["next_seq"]
        or np.unique(seqs).size != len(seqs)
        or meta["next_seq"] - meta["oldest_seq"] > max(2 * capacity, 16)
    ):
        fail("col_seq", "insertion order is inconsistent")
    if not np.all(np.diff(seqs) > 0):
        fail("slots_in_order", "must be in insertion order")
    checks = {
        "col_correct": (-1, 1),
        "col_finish_reason": (0, len(FINISH_REASONS) - 1),
        "col_task_code": (0, len(names) - 1),
        "col_times_sampled": (0, None),
        "col_policy_version": (0, None),
        "col_reward_version": (0, None),
        "col_annotator": (0, len(ANNOTATORS) - 1),
        "col_annotation_cost": (0, None),
        "col_epoch": (0, None),
    }
    for name, (low, high) in checks.items():
        values = arrays[name]
        if values.size and (values.min() < low or (high is not None and values.max() > high)):
            fail(name, "values out of range")
