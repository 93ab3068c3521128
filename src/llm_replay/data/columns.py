"""Each rollout's own values, declared once: what a column is called on a batch, on a `Rollout`
and in a table's storage, its dtype, the value it takes when not given, and its check.

`RolloutBatch`, `Sample`, the table's storage, its checkpoints and its durable log all read
`ROW_COLUMNS` instead of naming every column, so a new per-rollout value is one entry here plus a
field on the three dataclasses that carry it (`Rollout`, `RolloutBatch`, `Sample`). The token
payload (prompt and completion ids, behaviour log-probs, lengths) and the task tags (codes into a
table of names) are not row columns: each has a layout of its own.

`validate_columns` is the one gate every `RolloutBatch` passes through, whichever constructor
built it; it returns read-only arrays, so a validated batch cannot be changed in place afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_replay.data.validation import (
    ANNOTATORS,
    FINISH_REASONS,
    InvalidRolloutError,
    annotator_codes,
    check_logprobs,
    check_token_ids,
    correct_flags,
    finish_codes,
    lengths_array,
    non_negative_floats,
    offsets_of,
    per_rollout_floats,
    per_rollout_ints,
    readonly,
    task_table,
)

REQUIRED: Any = object()
"""A column's `default` when every batch must give it."""


def _same(value: Any) -> Any:
    return value


def _float_or_none(value: Any) -> float | None:
    return None if math.isnan(value) else float(value)


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


@dataclass(frozen=True)
class RowColumn:
    """One per-rollout value. `name` is the batch's and the `Sample`'s attribute (plural),
    `field` the `Rollout`'s and the storage's (singular); `check(values, n)` validates given values;
    `default` fills a batch that does not give it (`REQUIRED`: it must), and, where `added` (the
    column came after the first saved format), a checkpoint or log record written before it."""

    name: str
    field: str
    dtype: type
    check: Callable[[object, int], np.ndarray]
    default: Any = REQUIRED
    added: bool = False
    to_item: Callable[[Any], Any] = _same
    from_item: Callable[[Any], Any] = _same

    def values(self, given: object | None, n: int) -> np.ndarray:
        """The column checked and narrowed to its dtype, or its default when not given."""
        if given is None:
            if self.default is REQUIRED:
                raise InvalidRolloutError(self.name, None, "required")
            return np.full(n, self.default, dtype=self.dtype)
        return self.check(given, n).astype(self.dtype, copy=False)

    def item(self, array: np.ndarray, i: int) -> Any:
        """Row `i` as a `Rollout` holds it."""
        return self.to_item(array[i].item())

    def items(self, array: np.ndarray) -> list[Any]:
        """Every row as a `Rollout` holds it."""
        values = array.tolist()
        return values if self.to_item is _same else [self.to_item(v) for v in values]

    def column(self, items: list[Any]) -> np.ndarray:
        """The column of `Rollout` values `items`."""
        values = items if self.from_item is _same else [self.from_item(v) for v in items]
        return np.array(values, dtype=self.dtype)


def _floats(name: str, allow_nan: bool) -> Callable[[object, int], np.ndarray]:
    return lambda values, n: per_rollout_floats(name, values, n, allow_nan=allow_nan)


def _ints(name: str, minimum: int = 0) -> Callable[[object, int], np.ndarray]:
    return lambda values, n: per_rollout_ints(name, values, n, minimum)


ROW_COLUMNS: tuple[RowColumn, ...] = (
    RowColumn("rewards", "reward", np.float64, _floats("rewards", False)),
    RowColumn(
        "advantages",
        "advantage",
        np.float64,
        _floats("advantages", True),
        default=math.nan,  # not computed yet
        to_item=_float_or_none,
        from_item=_nan_if_none,
    ),
    RowColumn("group_ids", "group_id", np.int64, _ints("group_ids")),
    RowColumn("policy_versions", "policy_version", np.int64, _ints("policy_versions")),
    RowColumn(
        "correct",
        "correct",
        np.int8,
        correct_flags,
        default=-1,  # unknown
        to_item=lambda v: None if v < 0 else bool(v),
        from_item=lambda v: -1 if v is None else int(v),
    ),
    RowColumn(
        "finish_reasons",
        "finish_reason",
        np.uint8,
        finish_codes,
        default=0,
        to_item=FINISH_REASONS.__getitem__,
        from_item=FINISH_REASONS.index,
    ),
    RowColumn(
        "reward_versions", "reward_version", np.int64, _ints("reward_versions"), 0, added=True
    ),
    RowColumn(
        "reference_logprobs",
        "reference_logprob",
        np.float64,
        _floats("reference_logprobs", True),
        default=math.nan,  # not taken
        added=True,
        to_item=_float_or_none,
        from_item=_nan_if_none,
    ),
    RowColumn(
        "annotators",
        "annotator",
        np.uint8,
        annotator_codes,
        default=0,  # not in a pair
        added=True,
        to_item=ANNOTATORS.__getitem__,
        from_item=ANNOTATORS.index,
    ),
    RowColumn(
        "annotation_costs",
        "annotation_cost",
        np.float64,
        lambda values, n: non_negative_floats("annotation_costs", values, n),
        default=0.0,
        added=True,
    ),
    RowColumn(
        "row_ids",
        "row_id",
        np.int64,
        _ints("row_ids", minimum=-1),
        default=-1,  # none given
        added=True,
    ),
)
"""`row_ids` is a front end's own id for each row (verl's kept trajectory), carried through the
table so a drawn row is found again by it; llm-replay never reads it."""
ROW_NAMES = tuple(c.name for c in ROW_COLUMNS)


def unknown_rows(rows: Mapping[str, object], where: str) -> None:
    """Refuse row values no column declares, naming them."""
    unknown = sorted(set(rows) - set(ROW_NAMES))
    if unknown:
        raise TypeError(f"{where}: unknown column(s) {unknown}; the row columns are {ROW_NAMES}")


def validate_columns(
    *,
    prompt_ids: object,
    prompt_lengths: object,
    completion_ids: object,
    completion_lengths: object,
    behaviour_logprobs: object,
    task_codes: object | None,
    task_names: object,
    allow_empty: bool,
    **rows: object,
) -> dict[str, Any]:
    """Every column of a batch checked and narrowed to its storage dtype, as read-only arrays
    (`rows`: the row columns by name, as a batch's fields hold them)."""
    p_len = lengths_array("prompt_lengths", prompt_lengths)
    c_len = lengths_array("completion_lengths", completion_lengths)
    n = len(c_len)
    if len(p_len) != n:
        raise InvalidRolloutError("prompt_lengths", f"<{len(p_len)} rows>", f"expected {n}")
    p_off, c_off = offsets_of(p_len), offsets_of(c_len)
    empty_prompt = np.flatnonzero(p_len == 0)
    if empty_prompt.size:
        raise InvalidRolloutError(
            f"rollouts[{int(empty_prompt[0])}].prompt_ids", [], "needs at least one token"
        )
    empty = np.flatnonzero(c_len == 0)
    if empty.size and not allow_empty:
        raise InvalidRolloutError(
            f"rollouts[{int(empty[0])}].completion_ids",
            [],
            "empty completion; pass allow_empty=True if intended",
        )
    codes, names = task_table(task_codes, task_names, n)
    columns: dict[str, Any] = {
        "prompt_ids": check_token_ids("prompt_ids", prompt_ids, p_off),
        "prompt_lengths": p_len,
        "completion_ids": check_token_ids("completion_ids", completion_ids, c_off),
        "completion_lengths": c_len,
        "behaviour_logprobs": check_logprobs(behaviour_logprobs, c_off),
        "task_codes": codes,
    }
    for column in ROW_COLUMNS:
        columns[column.name] = column.values(rows.get(column.name), n)
    out: dict[str, Any] = {name: readonly(array) for name, array in columns.items()}
    out["task_names"] = names
    return out
