"""`RolloutBatch`: the columnar form of rollouts that crosses every seam (generator -> table ->
learner).

Flat token arrays plus per-rollout lengths, so a batch of thousands of variable-length rollouts is a
handful of numpy arrays rather than thousands of Python objects. Its validation is vectorised over
the whole batch, and every check raises `InvalidRolloutError` naming the field and the rollout's
index. `Rollout` and `Group` (`rollout.py`) are the per-item views it is built from and read as.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.data.columns import ROW_COLUMNS, unknown_rows, validate_columns
from llm_replay.data.rollout import Group, Rollout
from llm_replay.data.validation import (
    FloatArray,
    IntArray,
    InvalidRolloutError,
    encode_tasks,
    offsets_of,
    per_rollout_floats,
    ragged_rows,
)

__all__ = ["RolloutBatch", "concat_ranges"]


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    """Columnar rollouts: flat token arrays plus per-rollout lengths and scalars.

    Shapes (N rollouts, P = sum of prompt lengths, C = sum of completion lengths):
    prompt_ids [P] int32, prompt_lengths [N] int32, completion_ids [C] int32,
    completion_lengths [N] int32, behaviour_logprobs [C] float32, rewards/advantages [N] float64
    (advantage NaN = not computed yet), group_ids/policy_versions [N] int64, correct [N] int8
    (-1 unknown), finish_reasons [N] uint8 (index into FINISH_REASONS), task_codes [N] int16 with
    task_names the code -> name table, reward_versions [N] int64 (the reward model's version that
    scored each rollout; zeros when not given). A rollout in a preference pair also carries
    reference_logprobs [N] float64 (its completion's summed log-prob under the reference policy,
    taken at generation; NaN when not taken), annotators [N] uint8 (index into ANNOTATORS; 0: not
    in a pair) and annotation_costs [N] float64 (its share of the pair's annotation cost).
    row_ids [N] int64 is a front end's own id for each row (-1: none). Every per-rollout
    column but the task tags is declared once in `columns.ROW_COLUMNS`, which the constructors,
    `select`, `concat` and the per-item views read.
    """

    prompt_ids: IntArray
    prompt_lengths: npt.NDArray[np.int32]
    completion_ids: IntArray
    completion_lengths: npt.NDArray[np.int32]
    behaviour_logprobs: FloatArray
    rewards: npt.NDArray[np.float64]
    advantages: npt.NDArray[np.float64]
    group_ids: npt.NDArray[np.int64]
    policy_versions: npt.NDArray[np.int64]
    correct: npt.NDArray[np.int8]
    finish_reasons: npt.NDArray[np.uint8]
    task_codes: npt.NDArray[np.int16]
    task_names: tuple[str, ...] = field(default=("",))
    allow_empty: bool = field(default=False, repr=False)
    reward_versions: npt.NDArray[np.int64] = field(default=None)  # type: ignore[arg-type]
    reference_logprobs: npt.NDArray[np.float64] = field(default=None)  # type: ignore[arg-type]
    annotators: npt.NDArray[np.uint8] = field(default=None)  # type: ignore[arg-type]
    annotation_costs: npt.NDArray[np.float64] = field(default=None)  # type: ignore[arg-type]
    row_ids: npt.NDArray[np.int64] = field(default=None)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        columns = validate_columns(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        )
        for name, value in columns.items():
            object.__setattr__(self, name, value)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_ragged(
        cls,
        *,
        prompt_ids: Sequence[object],
        completion_ids: Sequence[object],
        behaviour_logprobs: Sequence[object],
        tasks: Sequence[str] | str = "",
        allow_empty: bool = False,
        **rows: object,
    ) -> RolloutBatch:
        """Build and validate a batch from per-rollout sequences (what inference engines return);
        `rows` are the row columns by their batch names (`columns.ROW_COLUMNS`: rewards,
        group_ids and policy_versions required, the rest optional)."""
        prompt_lengths, prompts = ragged_rows("prompt_ids", prompt_ids, "iu")
        n = len(prompt_lengths)
        completion_lengths, completions = ragged_rows("completion_ids", completion_ids, "iu")
        logprob_lengths, logprobs = ragged_rows("behaviour_logprobs", behaviour_logprobs, "fiu")
        for name, lengths in (
            ("completion_ids", completion_lengths),
            ("behaviour_logprobs", logprob_lengths),
        ):
            if len(lengths) != n:
                raise InvalidRolloutError(name, f"<{len(lengths)} rows>", f"expected {n} rows")
        mismatch = np.flatnonzero(logprob_lengths != completion_lengths)
        if mismatch.size:
            i = int(mismatch[0])
            raise InvalidRolloutError(
                f"rollouts[{i}].behaviour_logprobs",
                f"<{logprob_lengths[i]} values>",
                f"needs one log-prob per completion token ({completion_lengths[i]})",
            )
        codes, names = encode_tasks(tasks, n)
        return cls.from_flat(
            prompt_ids=prompts,
            prompt_lengths=prompt_lengths,
            completion_ids=completions,
            completion_lengths=completion_lengths,
            behaviour_logprobs=logprobs,
            task_codes=codes,
            task_names=names,
            allow_empty=allow_empty,
            **rows,
        )

    @classmethod
    def from_flat(
        cls,
        *,
        prompt_ids: object,
        prompt_lengths: object,
        completion_ids: object,
        completion_lengths: object,
        behaviour_logprobs: object,
        task_codes: object | None = None,
        task_names: Sequence[str] = ("",),
        allow_empty: bool = False,
        **rows: object,
    ) -> RolloutBatch:
        """Build and validate a batch from flat arrays and lengths (vectorised checks); `rows`
        as for `from_ragged`."""
        unknown_rows(rows, "RolloutBatch")
        return cls(
            prompt_ids=prompt_ids,  # type: ignore[arg-type]
            prompt_lengths=prompt_lengths,  # type: ignore[arg-type]
            completion_ids=completion_ids,  # type: ignore[arg-type]
            completion_lengths=completion_lengths,  # type: ignore[arg-type]
            behaviour_logprobs=behaviour_logprobs,  # type: ignore[arg-type]
            task_codes=task_codes,  # type: ignore[arg-type]
            task_names=tuple(task_names),
            allow_empty=allow_empty,
            **{c.name: rows.get(c.name) for c in ROW_COLUMNS},  # type: ignore[arg-type]
        )

    @classmethod
    def from_rollouts(cls, rollouts: Sequence[Rollout] | Group) -> RolloutBatch:
        items = list(rollouts)
        for index, item in enumerate(items):
            if not isinstance(item, Rollout):
                raise InvalidRolloutError(f"rollouts[{index}]", item, "must be a Rollout")
        names: dict[str, int] = {"": 0}
        codes = np.array([names.setdefault(r.task, len(names)) for r in items], dtype=np.int16)
        return cls.from_flat(
            prompt_ids=_concat([r.prompt_ids for r in items], np.int32),
            prompt_lengths=np.array([r.prompt_ids.size for r in items], dtype=np.int32),
            completion_ids=_concat([r.completion_ids for r in items], np.int32),
            completion_lengths=np.array([r.completion_ids.size for r in items], dtype=np.int32),
            behaviour_logprobs=_concat([r.behaviour_logprobs for r in items], np.float32),
            task_codes=codes,
            task_names=tuple(names),
            allow_empty=True,  # each Rollout already enforced its own flag
            **{c.name: c.column([getattr(r, c.field) for r in items]) for c in ROW_COLUMNS},
        )

    @classmethod
    def coerce(cls, data: RolloutBatch | Group | Rollout | Sequence[Rollout]) -> RolloutBatch:
        """Accept any of the data-model types where a batch is expected."""
        if isinstance(data, RolloutBatch):
            return data
        if isinstance(data, Rollout):
            return cls.from_rollouts([data])
        if isinstance(data, Group):
            return cls.from_rollouts(data.rollouts)
        if isinstance(data, Sequence) and not isinstance(data, str | bytes):
            return cls.from_rollouts(data)
        raise InvalidRolloutError("rollouts", data, "expected a RolloutBatch, Group or Rollouts")

    @classmethod
    def concat(cls, batches: Sequence[RolloutBatch]) -> RolloutBatch:
        if not batches:
            raise ValueError("concat needs at least one batch")
        names: dict[str, int] = {}
        code_parts = []
        for batch in batches:
            remap = np.array(
                [names.setdefault(name, len(names)) for name in batch.task_names], dtype=np.int16
            )
            code_parts.append(remap[batch.task_codes])
        return cls(
            prompt_ids=np.concatenate([b.prompt_ids for b in batches]),
            prompt_lengths=np.concatenate([b.prompt_lengths for b in batches]),
            completion_ids=np.concatenate([b.completion_ids for b in batches]),
            completion_lengths=np.concatenate([b.completion_lengths for b in batches]),
            behaviour_logprobs=np.concatenate([b.behaviour_logprobs for b in batches]),
            task_codes=np.concatenate(code_parts),
            task_names=tuple(names),
            allow_empty=True,  # each part was admitted under its own flag
            **{c.name: np.concatenate([getattr(b, c.name) for b in batches]) for c in ROW_COLUMNS},
        )

    # ----------------------------------------------------------------- views
    def __len__(self) -> int:
        return len(self.completion_lengths)

    @property
    def num_tokens(self) -> int:
        return int(self.prompt_ids.size + self.completion_ids.size)

    def uninformative_groups(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """(the group ids, sorted; for each, whether all its rollouts got the same reward), the
        groups that teach nothing under group baselines."""
        groups, inverse = np.unique(self.group_ids, return_inverse=True)
        low = np.full(len(groups), np.inf)
        high = np.full(len(groups), -np.inf)
        np.minimum.at(low, inverse, self.rewards)
        np.maximum.at(high, inverse, self.rewards)
        return groups.astype(np.int64), high <= low

    def __getitem__(self, index: int) -> Rollout:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"rollout index {index} out of range for a batch of {n}")
        i = index % n
        p0 = int(self.prompt_lengths[:i].sum())
        c0 = int(self.completion_lengths[:i].sum())
        p1, c1 = p0 + int(self.prompt_lengths[i]), c0 + int(self.completion_lengths[i])
        row = {c.field: c.item(getattr(self, c.name), i) for c in ROW_COLUMNS}
        return self._rollout(i, p0, p1, c0, c1, row)

    def _rollout(self, i: int, p0: int, p1: int, c0: int, c1: int, row: dict[str, Any]) -> Rollout:
        return Rollout(
            prompt_ids=self.prompt_ids[p0:p1],
            completion_ids=self.completion_ids[c0:c1],
            behaviour_logprobs=self.behaviour_logprobs[c0:c1],
            task=self.task_names[int(self.task_codes[i])],
            allow_empty=True,
            **row,
        )

    def __iter__(self) -> Iterator[Rollout]:
        p_off = offsets_of(self.prompt_lengths).tolist()
        c_off = offsets_of(self.completion_lengths).tolist()
        columns = [(c.field, c.items(getattr(self, c.name))) for c in ROW_COLUMNS]
        for i in range(len(self)):
            row = {field: values[i] for field, values in columns}
            yield self._rollout(i, p_off[i], p_off[i + 1], c_off[i], c_off[i + 1], row)

    def rollouts(self) -> list[Rollout]:
        return list(self)

    @property
    def tasks(self) -> tuple[str, ...]:
        """Each rollout's task tag ('' when untagged)."""
        return tuple(self.task_names[int(c)] for c in self.task_codes)

    def with_tasks(self, tasks: Sequence[str] | str) -> RolloutBatch:
        """The same rollouts tagged with `tasks` (one name per rollout, or one for all)."""
        codes, names = encode_tasks(tasks, len(self))
        return dataclasses.replace(self, task_codes=codes, task_names=names)

    def with_advantages(self, advantages: object) -> RolloutBatch:
        values = per_rollout_floats("advantages", advantages, len(self), allow_nan=False)
        return dataclasses.replace(self, advantages=values)

    def select(self, indices: npt.ArrayLike) -> RolloutBatch:
        """The rollouts at `indices`, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        p_off, c_off = offsets_of(self.prompt_lengths), offsets_of(self.completion_lengths)
        p_take = concat_ranges(p_off[idx], self.prompt_lengths[idx])
        c_take = concat_ranges(c_off[idx], self.completion_lengths[idx])
        return RolloutBatch(
            prompt_ids=self.prompt_ids[p_take],
            prompt_lengths=self.prompt_lengths[idx],
            completion_ids=self.completion_ids[c_take],
            completion_lengths=self.completion_lengths[idx],
            behaviour_logprobs=self.behaviour_logprobs[c_take],
            task_codes=self.task_codes[idx],
            task_names=self.task_names,
            allow_empty=True,
            **{c.name: getattr(self, c.name)[idx] for c in ROW_COLUMNS},
        )


def _concat(parts: Sequence[npt.NDArray[Any]], dtype: type) -> npt.NDArray[Any]:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def concat_ranges(starts: npt.ArrayLike, lengths: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Concatenated aranges [s, s + l) for each (s, l), vectorised."""
    length_arr = np.asarray(lengths, dtype=np.int64)
    total = int(length_arr.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(length_arr)
    shifts = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - length_arr), length_arr)
    return shifts + np.arange(total, dtype=np.int64)
