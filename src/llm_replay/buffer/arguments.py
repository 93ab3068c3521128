"""Checks of the arguments of public table calls: each names the argument and the bad value,
and runs before the call touches any state."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from llm_replay.checks import integer

INT32_MIN, INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)
I64 = npt.NDArray[np.int64]


def batch_size_arg(value: object) -> int:
    return integer("batch_size", value, minimum=1)


def pad_id_arg(value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not INT32_MIN <= int(value) <= INT32_MAX
    ):
        raise ValueError(f"pad_id = {value!r}: must be an integer that fits int32")
    return int(value)


def timeout_arg(value: float | None) -> float | None:
    if value is None:
        return None
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"timeout = {value!r}: must be None or a finite number >= 0")
    return float(value)


def keys_arg(keys: npt.ArrayLike) -> I64:
    array = np.asarray(keys)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"keys = {keys!r}: must be a 1-D array of integers")
    return array.astype(np.int64, copy=False)


def token_arg(value: object) -> int | None:
    if value is None:
        return None
    return integer("token", value, minimum=0)


def item_bound_args(
    max_items: int | None, groups_per_item: int | None
) -> tuple[int | None, int | None]:
    """A table's bound in work items: both or neither, each an int >= 1."""
    if (max_items is None) != (groups_per_item is None):
        raise ValueError(
            f"max_items = {max_items!r}, groups_per_item = {groups_per_item!r}: give both or "
            "neither"
        )
    for field, value in (("max_items", max_items), ("groups_per_item", groups_per_item)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{field} = {value!r}: expected an int")
        if value is not None and value < 1:
            raise ValueError(f"{field} = {value}: must be >= 1")
    return max_items, groups_per_item
