"""Validation of rollout fields: every check names the field (and row) and the offending value.

The same checks serve one `Rollout` and a whole `RolloutBatch`: given the row offsets of a flat
batch array, an error names `rollouts[row].field[col]`; without them, the field of one rollout.
Checks are vectorised over the whole batch, so validating thousands of rollouts costs a handful
of numpy passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float32]
Offsets = npt.NDArray[np.int64]

FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")
"""Why generation ended: an end-of-sequence token, the length limit, or an aborted request."""

MAX_TOKEN_ID = np.iinfo(np.int32).max


class InvalidRolloutError(ValueError):
    """A rollout (or a batch of them) failed validation; `field` names what was wrong."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field} = {_short(value)}: {reason}")


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def offsets_of(lengths: npt.NDArray[np.int32]) -> Offsets:
    """Row boundaries [0, l0, l0 + l1, ...] of a flat array with these row lengths."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _flat_array(name: str, values: object, offsets: Offsets | None) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise InvalidRolloutError(name, values, f"must be a 1-D sequence, got {array.ndim}-D")
    if offsets is not None and len(array) != offsets[-1]:
        raise InvalidRolloutError(name, f"<{len(array)} values>", f"expected {int(offsets[-1])}")
    return array


def _locate(name: str, flat: int, offsets: Offsets | None, *, indexed: bool) -> str:
    if offsets is None:
        return f"{name}[{flat}]" if indexed else name
    row = int(np.searchsorted(offsets, flat, side="right") - 1)
    return f"rollouts[{row}].{name}[{flat - int(offsets[row])}]"


def check_token_ids(name: str, values: object, offsets: Offsets | None = None) -> IntArray:
    """Token ids as int32; each must be an integer in [0, 2^31 - 1]."""
    array = _flat_array(name, values, offsets)
    if array.size == 0:
        return np.zeros(0, dtype=np.int32)
    if array.dtype.kind not in "iu":
        raise InvalidRolloutError(name, values, f"token ids must be integers, got {array.dtype}")
    bad = (array < 0) | (array > MAX_TOKEN_ID)
    if bad.any():
        flat = int(np.argmax(bad))
        raise InvalidRolloutError(
            _locate(name, flat, offsets, indexed=False),
            int(array[flat]),
            f"token ids must be in [0, {MAX_TOKEN_ID}]",
        )
    return array.astype(np.int32, copy=False)


def check_logprobs(
    values: object, offsets: Offsets | None = None, name: str = "behaviour_logprobs"
) -> FloatArray:
    """Log-probs as float32; each must be finite and <= 0."""
    array = _flat_array(name, values, offsets)
    if array.size and array.dtype.kind not in "fiu":
        raise InvalidRolloutError(
            name, values, f"log-probs must be real numbers, got {array.dtype}"
        )
    array = array.astype(np.float32, copy=False)
    # One pass: NaN compares False, so `<= 0` alone rejects NaN and +inf; -inf is caught separately.
    ok = array <= 0
    if not ok.all() or (array.size and np.isneginf(array.min())):
        flat = int(np.argmax(~ok | np.isneginf(array)))
        raise InvalidRolloutError(
            _locate(name, flat, offsets, indexed=True),
            float(array[flat]),
            "log-probs must be finite and <= 0",
        )
    return array


def as_int(name: str, value: object, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidRolloutError(name, value, "must be an integer")
    result = int(value)
    if minimum is not None and result < minimum:
        raise InvalidRolloutError(name, value, f"must be >= {minimum}")
    return result


def as_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidRolloutError(name, value, "must be a real number")
    result = float(value)
    if not math.isfinite(result):
        raise InvalidRolloutError(name, value, "must be finite")
    return result


def lengths_of(name: str, items: Sequence[object]) -> npt.NDArray[np.int32]:
    """The length of every row of a ragged input."""
    try:
        return np.fromiter((len(x) for x in items), dtype=np.int32, count=len(items))  # type: ignore[arg-type]
    except TypeError as error:
        raise InvalidRolloutError(name, items, "must be a sequence of 1-D sequences") from error


def concat_rows(parts: Sequence[object], dtype: type) -> npt.NDArray[Any]:
    """Rows of a ragged input as one flat array."""
    if not parts:
        return np.zeros(0, dtype=dtype)
    return np.concatenate([np.asarray(p) for p in parts])


def encode_tasks(
    tasks: Sequence[str] | str, n: int
) -> tuple[npt.NDArray[np.int16], tuple[str, ...]]:
    if isinstance(tasks, str):
        return np.zeros(n, dtype=np.int16), (tasks,)
    if len(tasks) != n:
        raise InvalidRolloutError("tasks", f"<{len(tasks)} rows>", f"expected {n} rows")
    names: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if not isinstance(task, str):
            raise InvalidRolloutError(f"rollouts[{index}].task", task, "must be a string")
    codes = np.array([names.setdefault(t, len(names)) for t in tasks], dtype=np.int16)
    return codes, tuple(names) or ("",)


def lengths_array(name: str, values: object) -> npt.NDArray[np.int32]:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise InvalidRolloutError(name, values, "must be a 1-D integer array")
    if array.size and array.min() < 0:
        raise InvalidRolloutError(name, int(array.min()), "lengths must be non-negative")
    return array.astype(np.int32, copy=False)


def per_rollout_floats(
    name: str, values: object, n: int, *, allow_nan: bool
) -> npt.NDArray[np.float64]:
    array = np.asarray(values)
    if array.ndim == 0:
        array = np.full(n, array)
    if array.shape != (n,) or (array.size and array.dtype.kind not in "fiub"):
        raise InvalidRolloutError(name, values, f"expected {n} real numbers")
    if array.dtype.kind == "b":
        raise InvalidRolloutError(name, values, "expected real numbers, got booleans")
    array = array.astype(np.float64, copy=False)
    bad = np.isinf(array) if allow_nan else ~np.isfinite(array)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidRolloutError(f"rollouts[{i}].{name[:-1]}", float(array[i]), "must be finite")
    return array


def per_rollout_ints(name: str, values: object, n: int) -> npt.NDArray[np.int64]:
    array = np.asarray(values)
    if array.ndim == 0:
        array = np.full(n, array)
    if array.shape != (n,) or (array.size and array.dtype.kind not in "iu"):
        raise InvalidRolloutError(name, values, f"expected {n} integers")
    array = array.astype(np.int64, copy=False)
    if array.size and array.min() < 0:
        i = int(np.argmin(array))
        raise InvalidRolloutError(f"rollouts[{i}].{name[:-1]}", int(array[i]), "must be >= 0")
    return array


def correct_flags(values: object | None, n: int) -> npt.NDArray[np.int8]:
    if values is None:
        return np.full(n, -1, dtype=np.int8)
    array = np.asarray(values)
    if array.shape != (n,):
        raise InvalidRolloutError("correct", values, f"expected {n} flags")
    if array.dtype == object:
        return np.array([-1 if v is None else int(bool(v)) for v in array], dtype=np.int8)
    array = array.astype(np.int8)
    if array.size and (array.min() < -1 or array.max() > 1):
        raise InvalidRolloutError("correct", values, "flags must be -1 (unknown), 0 or 1")
    return array


def finish_codes(
    values: Sequence[str] | npt.NDArray[np.uint8] | None, n: int
) -> npt.NDArray[np.uint8]:
    if values is None:
        return np.zeros(n, dtype=np.uint8)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        if values.shape != (n,) or (n and values.max() >= len(FINISH_REASONS)):
            raise InvalidRolloutError("finish_reasons", values, f"codes index {FINISH_REASONS}")
        return values.astype(np.uint8)
    if len(values) != n:
        raise InvalidRolloutError("finish_reasons", f"<{len(values)} rows>", f"expected {n}")
    out = np.empty(n, dtype=np.uint8)
    for i, reason in enumerate(values):
        if reason not in FINISH_REASONS:
            raise InvalidRolloutError(
                f"rollouts[{i}].finish_reason", reason, f"not in {FINISH_REASONS}"
            )
        out[i] = FINISH_REASONS.index(reason)
    return out
