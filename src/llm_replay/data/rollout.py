"""The data model: Rollout, Group and RolloutBatch, validated at construction.

A *rollout* is one completion of one prompt: prompt token ids, completion token ids, the behaviour
log-prob of every completion token (from the logits that sampled it), a reward, an advantage
(optional until computed), the group it was scored in, the policy version of the weights that
generated it, the version of the reward model that scored it (0 for a verifier, which never
changes), and a little task metadata.

`Rollout` and `Group` are the per-item views people write by hand and read in tests. `RolloutBatch`
is the columnar form that crosses every seam (generator -> table -> learner): flat token arrays plus
per-rollout lengths, so a batch of thousands of variable-length rollouts is a handful of numpy
arrays rather than thousands of Python objects. Its validation is vectorised over the whole batch.

Every check (in `validation`) raises `InvalidRolloutError` naming the field (with the rollout's
index inside a batch) and the offending value. Token ids are stored as int32 and log-probs as
float32: vocabularies fit in 31 bits and behaviour log-probs never need more than single precision.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.data.validation import (
    ANNOTATORS,
    FINISH_REASONS,
    MAX_TOKEN_ID,
    FloatArray,
    IntArray,
    InvalidRolloutError,
    as_finite,
    as_int,
    check_logprobs,
    check_token_ids,
    encode_tasks,
    offsets_of,
    per_rollout_floats,
    ragged_rows,
    readonly,
    validate_columns,
)

__all__ = [
    "ANNOTATORS",
    "FINISH_REASONS",
    "MAX_TOKEN_ID",
    "Group",
    "InvalidRolloutError",
    "Rollout",
    "RolloutBatch",
    "concat_ranges",
]


@dataclass(frozen=True, slots=True, eq=False)
class Rollout:
    """One completion of one prompt, validated on construction."""

    prompt_ids: IntArray
    completion_ids: IntArray
    behaviour_logprobs: FloatArray
    reward: float
    group_id: int
    policy_version: int
    advantage: float | None = None
    task: str = ""
    correct: bool | None = None
    finish_reason: str = "stop"
    allow_empty: bool = False
    reward_version: int = 0
    reference_logprob: float | None = None
    annotator: str = ""
    annotation_cost: float = 0.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "prompt_ids", readonly(check_token_ids("prompt_ids", self.prompt_ids)))
        set_(
            self, "completion_ids", readonly(check_token_ids("completion_ids", self.completion_ids))
        )
        set_(self, "behaviour_logprobs", readonly(check_logprobs(self.behaviour_logprobs)))
        if self.prompt_ids.size == 0:
            raise InvalidRolloutError("prompt_ids", [], "a rollout needs at least one prompt token")
        if len(self.behaviour_logprobs) != len(self.completion_ids):
            raise InvalidRolloutError(
                "behaviour_logprobs",
                f"<{len(self.behaviour_logprobs)} values>",
                f"needs one log-prob per completion token ({len(self.completion_ids)})",
            )
        if self.completion_ids.size == 0 and not self.allow_empty:
            raise InvalidRolloutError(
                "completion_ids", [], "empty completion; pass allow_empty=True if intended"
            )
        set_(self, "reward", as_finite("reward", self.reward))
        if self.advantage is not None:
            set_(self, "advantage", as_finite("advantage", self.advantage))
        set_(self, "group_id", as_int("group_id", self.group_id, minimum=0))
        set_(self, "policy_version", as_int("policy_version", self.policy_version, minimum=0))
        set_(self, "reward_version", as_int("reward_version", self.reward_version, minimum=0))
        if self.reference_logprob is not None:
            set_(self, "reference_logprob", as_finite("reference_logprob", self.reference_logprob))
        if self.annotator not in ANNOTATORS:
            raise InvalidRolloutError("annotator", self.annotator, f"not in {ANNOTATORS}")
        set_(self, "annotation_cost", as_finite("annotation_cost", self.annotation_cost))
        if self.annotation_cost < 0:
            raise InvalidRolloutError("annotation_cost", self.annotation_cost, "must be >= 0")
        if not isinstance(self.task, str):
            raise InvalidRolloutError("task", self.task, "must be a string")
        if self.correct is not None and not isinstance(self.correct, bool | np.bool_):
            raise InvalidRolloutError("correct", self.correct, "must be True, False or None")
        if self.finish_reason not in FINISH_REASONS:
            raise InvalidRolloutError(
                "finish_reason", self.finish_reason, f"not in {FINISH_REASONS}"
            )

    @property
    def num_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return int(self.prompt_ids.size + self.completion_ids.size)

    @property
    def metadata(self) -> dict[str, Any]:
        return {"task": self.task, "correct": self.correct, "finish_reason": self.finish_reason}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rollout):
            return NotImplemented
        return (
            np.array_equal(self.prompt_ids, other.prompt_ids)
            and np.array_equal(self.completion_ids, other.completion_ids)
            and np.array_equal(self.behaviour_logprobs, other.behaviour_logprobs)
            and self.reward == other.reward
            and self.advantage == other.advantage
            and self.group_id == other.group_id
            and self.policy_version == other.policy_version
            and self.reward_version == other.reward_version
            and self.reference_logprob == other.reference_logprob
            and self.annotator == other.annotator
            and self.annotation_cost == other.annotation_cost
            and self.metadata == other.metadata
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Group:
    """The rollouts of one prompt instance, scored together (GRPO's group)."""

    rollouts: tuple[Rollout, ...]

    def __init__(self, rollouts: Sequence[Rollout]) -> None:
        items = tuple(rollouts)
        if not items:
            raise InvalidRolloutError("group.rollouts", [], "a group needs at least one rollout")
        for index, item in enumerate(items):
            if not isinstance(item, Rollout):
                raise InvalidRolloutError(f"group.rollouts[{index}]", item, "must be a Rollout")
        first = items[0]
        for index, item in enumerate(items[1:], start=1):
            if item.group_id != first.group_id:
                raise InvalidRolloutError(
                    f"group.rollouts[{index}].group_id",
                    item.group_id,
                    f"differs from the group's id {first.group_id}",
                )
            if not np.array_equal(item.prompt_ids, first.prompt_ids):
                raise InvalidRolloutError(
                    f"group.rollouts[{index}].prompt_ids",
                    item.prompt_ids,
                    "every rollout of a group shares one prompt",
                )
        object.__setattr__(self, "rollouts", items)

    @property
    def group_id(self) -> int:
        return self.rollouts[0].group_id

    @property
    def prompt_ids(self) -> IntArray:
        return self.rollouts[0].prompt_ids

    @property
    def rewards(self) -> npt.NDArray[np.float64]:
        return np.array([r.reward for r in self.rollouts], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.rollouts)

    def __iter__(self) -> Iterator[Rollout]:
        return iter(self.rollouts)

    def to_batch(self) -> RolloutBatch:
        return RolloutBatch.from_rollouts(self.rollouts)


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
        rewards: object,
        group_ids: object,
        policy_versions: object,
        advantages: object | None = None,
        correct: object | None = None,
        finish_reasons: Sequence[str] | None = None,
        tasks: Sequence[str] | str = "",
        allow_empty: bool = False,
        reward_versions: object | None = None,
        reference_logprobs: object | None = None,
        annotators: object | None = None,
        annotation_costs: object | None = None,
    ) -> RolloutBatch:
        """Build and validate a batch from per-rollout sequences (what inference engines return)."""
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
            rewards=rewards,
            group_ids=group_ids,
            policy_versions=policy_versions,
            advantages=advantages,
            correct=correct,
            finish_reasons=finish_reasons,
            task_codes=codes,
            task_names=names,
            allow_empty=allow_empty,
            reward_versions=reward_versions,
            reference_logprobs=reference_logprobs,
            annotators=annotators,
            annotation_costs=annotation_costs,
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
        rewards: object,
        group_ids: object,
        policy_versions: object,
        advantages: object | None = None,
        correct: object | None = None,
        finish_reasons: Sequence[str] | npt.NDArray[np.uint8] | None = None,
        task_codes: object | None = None,
        task_names: Sequence[str] = ("",),
        allow_empty: bool = False,
        reward_versions: object | None = None,
        reference_logprobs: object | None = None,
        annotators: object | None = None,
        annotation_costs: object | None = None,
    ) -> RolloutBatch:
        """Build and validate a batch from flat arrays and lengths (vectorised checks)."""
        return cls(
            prompt_ids=prompt_ids,  # type: ignore[arg-type]
            prompt_lengths=prompt_lengths,  # type: ignore[arg-type]
            completion_ids=completion_ids,  # type: ignore[arg-type]
            completion_lengths=completion_lengths,  # type: ignore[arg-type]
            behaviour_logprobs=behaviour_logprobs,  # type: ignore[arg-type]
            rewards=rewards,  # type: ignore[arg-type]
            advantages=advantages,  # type: ignore[arg-type]
            group_ids=group_ids,  # type: ignore[arg-type]
            policy_versions=policy_versions,  # type: ignore[arg-type]
            correct=correct,  # type: ignore[arg-type]
            finish_reasons=finish_reasons,  # type: ignore[arg-type]
            task_codes=task_codes,  # type: ignore[arg-type]
            task_names=tuple(task_names),
            allow_empty=allow_empty,
            reward_versions=reward_versions,  # type: ignore[arg-type]
            reference_logprobs=reference_logprobs,  # type: ignore[arg-type]
            annotators=annotators,  # type: ignore[arg-type]
            annotation_costs=annotation_costs,  # type: ignore[arg-type]
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
            rewards=np.array([r.reward for r in items], dtype=np.float64),
            advantages=np.array(
                [np.nan if r.advantage is None else r.advantage for r in items], dtype=np.float64
            ),
            group_ids=np.array([r.group_id for r in items], dtype=np.int64),
            policy_versions=np.array([r.policy_version for r in items], dtype=np.int64),
            correct=np.array([-1 if r.correct is None else int(r.correct) for r in items], np.int8),
            finish_reasons=[r.finish_reason for r in items],
            task_codes=codes,
            task_names=tuple(names),
            allow_empty=True,  # each Rollout already enforced its own flag
            reward_versions=np.array([r.reward_version for r in items], dtype=np.int64),
            reference_logprobs=np.array(
                [np.nan if r.reference_logprob is None else r.reference_logprob for r in items],
                dtype=np.float64,
            ),
            annotators=np.array([ANNOTATORS.index(r.annotator) for r in items], dtype=np.uint8),
            annotation_costs=np.array([r.annotation_cost for r in items], dtype=np.float64),
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
            rewards=np.concatenate([b.rewards for b in batches]),
            advantages=np.concatenate([b.advantages for b in batches]),
            group_ids=np.concatenate([b.group_ids for b in batches]),
            policy_versions=np.concatenate([b.policy_versions for b in batches]),
            correct=np.concatenate([b.correct for b in batches]),
            finish_reasons=np.concatenate([b.finish_reasons for b in batches]),
            task_codes=np.concatenate(code_parts),
            task_names=tuple(names),
            allow_empty=True,  # each part was admitted under its own flag
            reward_versions=np.concatenate([b.reward_versions for b in batches]),
            reference_logprobs=np.concatenate([b.reference_logprobs for b in batches]),
            annotators=np.concatenate([b.annotators for b in batches]),
            annotation_costs=np.concatenate([b.annotation_costs for b in batches]),
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
        return self._rollout(i, p0, p1, c0, c1)

    def _rollout(self, i: int, p0: int, p1: int, c0: int, c1: int) -> Rollout:
        advantage = float(self.advantages[i])
        reference = float(self.reference_logprobs[i])
        correct = int(self.correct[i])
        return Rollout(
            prompt_ids=self.prompt_ids[p0:p1],
            completion_ids=self.completion_ids[c0:c1],
            behaviour_logprobs=self.behaviour_logprobs[c0:c1],
            reward=float(self.rewards[i]),
            advantage=None if math.isnan(advantage) else advantage,
            group_id=int(self.group_ids[i]),
            policy_version=int(self.policy_versions[i]),
            task=self.task_names[int(self.task_codes[i])],
            correct=None if correct < 0 else bool(correct),
            finish_reason=FINISH_REASONS[int(self.finish_reasons[i])],
            allow_empty=True,
            reward_version=int(self.reward_versions[i]),
            reference_logprob=None if math.isnan(reference) else reference,
            annotator=ANNOTATORS[int(self.annotators[i])],
            annotation_cost=float(self.annotation_costs[i]),
        )

    def __iter__(self) -> Iterator[Rollout]:
        p_off, c_off = offsets_of(self.prompt_lengths), offsets_of(self.completion_lengths)
        for i in range(len(self)):
            yield self._rollout(
                i, int(p_off[i]), int(p_off[i + 1]), int(c_off[i]), int(c_off[i + 1])
            )

    def rollouts(self) -> list[Rollout]:
        return list(self)

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
            rewards=self.rewards[idx],
            advantages=self.advantages[idx],
            group_ids=self.group_ids[idx],
            policy_versions=self.policy_versions[idx],
            correct=self.correct[idx],
            finish_reasons=self.finish_reasons[idx],
            task_codes=self.task_codes[idx],
            task_names=self.task_names,
            allow_empty=True,
            reward_versions=self.reward_versions[idx],
            reference_logprobs=self.reference_logprobs[idx],
            annotators=self.annotators[idx],
            annotation_costs=self.annotation_costs[idx],
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
