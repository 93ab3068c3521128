"""Validation of rollout fields: every check names the field (and row) and the offending value.

The same checks serve one `Rollout` and a whole `RolloutBatch`: given the row offsets of a flat
batch array, an error names `rollouts[row].field[col]`; without them, the field of one rollout.
Checks are vectorised over the whole batch, so validating thousands of rollouts costs a handful
of numpy passes. Every integer is range-checked *before* it is narrowed to its storage type, so a
value never wraps silently (a length of 2^32 + 4 is refused, not stored as 4).

`columns.validate_columns` puts a whole `RolloutBatch` through these checks, one column at a time
as `columns.ROW_COLUMNS` declares them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float32]
Offsets = npt.NDArray[np.int64]

FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")
"""Why generation ended: an end-of-sequence token, the length limit, or an aborted request."""

ANNOTATORS: tuple[str, ...] = ("", "verifier", "reward_model", "file")
"""Who judged a preference pair a rollout belongs to ("": the rollout is not in a pair)."""

MAX_TOKEN_ID = int(np.iinfo(np.int32).max)
MAX_LENGTH = int(np.iinfo(np.int32).max)
MAX_INT64 = int(np.iinfo(np.int64).max)
MAX_TASKS = int(np.iinfo(np.int16).max)


class InvalidRolloutError(ValueError):
    """A rollout (or a batch of them) failed validation; `field` names what was wrong."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field} = {_short(value)}: {reason}")


def _short(value: object, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view (the caller's own array stays writable)."""
    view = array.view()
    view.flags.writeable = False
    return view


def as_array(name: str, values: object) -> np.ndarray:
    """np.asarray that names the field when the input is not array-like (ragged nesting, say)."""
    try:
        return np.asarray(values)
    except (ValueError, TypeError, OverflowError) as error:
        raise InvalidRolloutError(name, values, f"not a numeric array ({error})") from None


def offsets_of(lengths: npt.NDArray[np.integer[Any]]) -> Offsets:
    """Row boundaries [0, l0, l0 + l1, ...] of a flat array with these row lengths."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _flat_array(name: str, values: object, offsets: Offsets | None) -> np.ndarray:
    array = as_array(name, values)
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
    if array.min() >= 0 and array.max() <= MAX_TOKEN_ID:  # two reductions, no mask: hot path
        return array.astype(np.int32, copy=False)
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
    """Log-probs as float32; each must be finite and <= 0 (checked before and after narrowing)."""
    array = _flat_array(name, values, offsets)
    if array.size == 0:
        return np.zeros(0, dtype=np.float32)
    if array.dtype.kind not in "fiu":
        raise InvalidRolloutError(
            name, values, f"log-probs must be real numbers, got {array.dtype}"
        )
    with np.errstate(over="ignore"):
        narrow = array.astype(np.float32, copy=False)
    # NaN compares False, so `<= 0` rejects NaN and +inf; -inf (or a float64 that overflows
    # float32) is caught on the narrowed copy. The reductions (NaN propagates through both) pass
    # a clean batch without building the mask.
    if array.max() <= 0 and np.isfinite(narrow.min()):
        return narrow
    bad = ~(array <= 0) | ~np.isfinite(narrow)
    if bad.any():
        flat = int(np.argmax(bad))
        raise InvalidRolloutError(
            _locate(name, flat, offsets, indexed=True),
            float(array[flat]),
            "log-probs must be finite and <= 0",
        )
    return narrow


def as_int(name: str, value: object, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidRolloutError(name, value, "must be an integer")
    result = int(value)
    if minimum is not None and result < minimum:
        raise InvalidRolloutError(name, value, f"must be >= {minimum}")
    if result > MAX_INT64:
        raise InvalidRolloutError(name, value, f"must be <= {MAX_INT64}")
    return result


def as_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidRolloutError(name, value, "must be a real number")
    try:
        result = float(value)
    except OverflowError:
        raise InvalidRolloutError(name, value, "must be finite") from None
    if not math.isfinite(result):
        raise InvalidRolloutError(name, value, "must be finite")
    return result


def ragged_rows(name: str, rows: object, kinds: str) -> tuple[npt.NDArray[np.int64], np.ndarray]:
    """(row lengths, rows concatenated) of a ragged input; each row must be a flat numeric
    sequence of a dtype kind in `kinds` (empty rows of any dtype are fine). Integers widen to
    int64 and reals to float64, so nothing is narrowed before the range checks."""
    if isinstance(rows, str | bytes) or not isinstance(rows, Sequence | np.ndarray):
        raise InvalidRolloutError(name, rows, "must be a sequence of 1-D sequences")
    fast = _numpy_rows(rows, kinds)
    if fast is not None:
        return fast
    wide = np.float64 if "f" in kinds else np.int64
    lengths = np.zeros(len(rows), dtype=np.int64)
    parts: list[np.ndarray] = []
    for index, row in enumerate(rows):
        field = f"rollouts[{index}].{name}"
        if isinstance(row, str | bytes):
            raise InvalidRolloutError(field, row, "must be a 1-D sequence of numbers")
        array = as_array(field, row)
        if array.ndim != 1:
            raise InvalidRolloutError(field, row, f"must be a 1-D sequence, got {array.ndim}-D")
        lengths[index] = array.size
        if array.size == 0:
            continue
        if array.dtype.kind not in kinds:
            raise InvalidRolloutError(field, row, f"must hold numbers, got {array.dtype}")
        if array.dtype.kind == "u" and wide is np.int64 and int(array.max()) > MAX_INT64:
            raise InvalidRolloutError(field, int(array.max()), "out of range")
        parts.append(array.astype(wide, copy=False))
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=wide)
    return lengths, flat


SAFE_DTYPES = {
    np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")
}


def _numpy_rows(rows: Any, kinds: str) -> tuple[npt.NDArray[np.int64], np.ndarray] | None:
    """The common case, fast: every row a 1-D numpy array of one dtype that needs no widening
    check (ints up to uint32, or floats when allowed). None sends the caller down the checked path
    (which also names the offending row)."""
    if not len(rows) or set(map(type, rows)) != {np.ndarray}:
        return None  # (map with C-level callables: this runs per row on every insert)
    if set(map(_ndim, rows)) != {1}:
        return None
    dtypes = set(map(_dtype, rows))
    if len(dtypes) != 1:
        return None
    dtype = dtypes.pop()
    if (
        not (dtype in SAFE_DTYPES or (dtype.kind == "f" and "f" in kinds))
        or dtype.kind not in kinds
    ):
        return None
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    return lengths, np.concatenate(rows)


_ndim = operator.attrgetter("ndim")
_dtype = operator.attrgetter("dtype")


def encode_tasks(
    tasks: Sequence[str] | str, n: int
) -> tuple[npt.NDArray[np.int16], tuple[str, ...]]:
    if isinstance(tasks, str):
        return np.zeros(n, dtype=np.int16), (tasks,)
    if not isinstance(tasks, Sequence | np.ndarray):
        raise InvalidRolloutError("tasks", tasks, "must be a string or one string per rollout")
    if len(tasks) != n:
        raise InvalidRolloutError("tasks", f"<{len(tasks)} rows>", f"expected {n} rows")
    names: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if not isinstance(task, str):
            raise InvalidRolloutError(f"rollouts[{index}].task", task, "must be a string")
    codes = np.array([names.setdefault(t, len(names)) for t in tasks], dtype=np.int64)
    if len(names) > MAX_TASKS:
        raise InvalidRolloutError("tasks", f"<{len(names)} names>", f"at most {MAX_TASKS}")
    return codes.astype(np.int16), tuple(names) or ("",)


def lengths_array(name: str, values: object) -> npt.NDArray[np.int32]:
    array = as_array(name, values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise InvalidRolloutError(name, values, "must be a 1-D integer array")
    if array.size and array.min() < 0:
        i = int(np.argmin(array))
        raise InvalidRolloutError(f"rollouts[{i}].{name}", int(array[i]), "must be >= 0")
    if array.size and array.max() > MAX_LENGTH:
        i = int(np.argmax(array))
        raise InvalidRolloutError(
            f"rollouts[{i}].{name}", int(array[i]), f"must be <= {MAX_LENGTH}"
        )
    return array.astype(np.int32, copy=False)


def per_rollout_floats(
    name: str, values: object, n: int, *, allow_nan: bool
) -> npt.NDArray[np.float64]:
    array = as_array(name, values)
    if array.ndim == 0:
        array = np.full(n, array)
    if array.shape != (n,) or (array.size and array.dtype.kind not in "fiub"):
        raise InvalidRolloutError(name, values, f"expected {n} real numbers")
    if array.dtype.kind == "b":
        raise InvalidRolloutError(name, values, "expected real numbers, got booleans")
    wide = array.astype(np.float64, copy=False)
    bad = np.isinf(wide) if allow_nan else ~np.isfinite(wide)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidRolloutError(f"rollouts[{i}].{name[:-1]}", float(wide[i]), "must be finite")
    return wide


def per_rollout_ints(name: str, values: object, n: int, minimum: int = 0) -> npt.NDArray[np.int64]:
    array = as_array(name, values)
    if array.ndim == 0:
        array = np.full(n, array)
    if array.shape != (n,) or (array.size and array.dtype.kind not in "iu"):
        raise InvalidRolloutError(name, values, f"expected {n} integers")
    if array.size and array.dtype.kind == "u" and int(array.max()) > MAX_INT64:
        i = int(np.argmax(array))
        raise InvalidRolloutError(f"rollouts[{i}].{name[:-1]}", int(array[i]), "out of range")
    if array.size and array.min() < minimum:
        i = int(np.argmin(array))
        raise InvalidRolloutError(
            f"rollouts[{i}].{name[:-1]}", int(array[i]), f"must be >= {minimum}"
        )
    return array.astype(np.int64, copy=False)


def correct_flags(values: object | None, n: int) -> npt.NDArray[np.int8]:
    """Per-rollout correctness: -1 unknown, 0 wrong, 1 correct (None and booleans accepted)."""
    if values is None:
        return np.full(n, -1, dtype=np.int8)
    array = as_array("correct", values)
    if array.ndim == 0:
        array = np.full(n, array)
    if array.shape != (n,):
        raise InvalidRolloutError("correct", values, f"expected {n} flags")
    if array.dtype == object:
        items = array.tolist()
        for i, v in enumerate(items):
            if v is not None and not (isinstance(v, bool | np.bool_) or v in (0, 1)):
                raise InvalidRolloutError(
                    f"rollouts[{i}].correct", v, "must be True, False or None"
                )
        return np.array([-1 if v is None else int(bool(v)) for v in items], dtype=np.int8)
    if array.size and array.dtype.kind not in "biu":
        raise InvalidRolloutError("correct", values, f"flags must be integers, got {array.dtype}")
    if array.size and array.dtype.kind != "b":
        bad = (array < -1) | (array > 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidRolloutError(
                f"rollouts[{i}].correct", int(array[i]), "flags must be -1 (unknown), 0 or 1"
            )
    return array.astype(np.int8, copy=False)


def annotator_codes(values: object | None, n: int) -> npt.NDArray[np.uint8]:
    """Who annotated each rollout's preference: codes into ANNOTATORS (0: not a pair)."""
    if values is None:
        return np.zeros(n, dtype=np.uint8)
    codes = per_rollout_ints("annotators", values, n)
    bad = codes >= len(ANNOTATORS)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidRolloutError(
            f"rollouts[{i}].annotator", int(codes[i]), f"codes index {ANNOTATORS}"
        )
    return codes.astype(np.uint8)


def non_negative_floats(name: str, values: object, n: int) -> npt.NDArray[np.float64]:
    array = per_rollout_floats(name, values, n, allow_nan=False)
    if array.size and array.min() < 0:
        i = int(np.argmin(array))
        raise InvalidRolloutError(f"rollouts[{i}].{name[:-1]}", float(array[i]), "must be >= 0")
    return array


def finish_codes(values: object | None, n: int) -> npt.NDArray[np.uint8]:
    if values is None:
        return np.zeros(n, dtype=np.uint8)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        if values.shape != (n,):
            raise InvalidRolloutError("finish_reasons", values, f"expected {n} codes")
        bad = (values < 0) | (values >= len(FINISH_REASONS))
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidRolloutError(
                f"rollouts[{i}].finish_reason", int(values[i]), f"codes index {FINISH_REASONS}"
            )
        return values.astype(np.uint8, copy=False)
    if isinstance(values, str) or not isinstance(values, Sequence | np.ndarray):
        raise InvalidRolloutError("finish_reasons", values, "expected one reason per rollout")
    if len(values) != n:
        raise InvalidRolloutError("finish_reasons", f"<{len(values)} rows>", f"expected {n}")
    out = np.empty(n, dtype=np.uint8)
    for i, reason in enumerate(values):
        if not isinstance(reason, str) or reason not in FINISH_REASONS:
            raise InvalidRolloutError(
                f"rollouts[{i}].finish_reason", reason, f"not in {FINISH_REASONS}"
            )
        out[i] = FINISH_REASONS.index(reason)
    return out


def task_table(
    codes: object | None, names: object, n: int
) -> tuple[npt.NDArray[np.int16], tuple[str, ...]]:
    """Per-rollout task codes indexing a table of task names."""
    if isinstance(names, str) or not isinstance(names, Sequence | np.ndarray):
        raise InvalidRolloutError("task_names", names, "must be a sequence of strings")
    table = tuple(names)
    if not table or len(table) > MAX_TASKS or not all(isinstance(t, str) for t in table):
        raise InvalidRolloutError("task_names", names, f"must be 1 to {MAX_TASKS} strings")
    if codes is None:
        return np.zeros(n, dtype=np.int16), table
    array = as_array("task_codes", codes)
    if array.shape != (n,) or (array.size and array.dtype.kind not in "iu"):
        raise InvalidRolloutError("task_codes", codes, f"expected {n} integers")
    bad = (array < 0) | (array >= len(table))
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidRolloutError(
            f"rollouts[{i}].task_code", int(array[i]), f"must index task_names {table}"
        )
    return array.astype(np.int16, copy=False), table
