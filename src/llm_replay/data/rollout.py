"""The data model: Rollout, Group and RolloutBatch, validated at construction.

A *rollout* is one completion of one prompt: prompt token ids, completion token ids, the behaviour
log-prob of every completion token (from the logits that sampled it), a reward, an advantage
(optional until computed), the group it was scored in, the policy version of the weights that
generated it, the version of the reward model that scored it (0 for a verifier, which never
changes), and a little task metadata.

`Rollout` and `Group` are the per-item views people write by hand and read in tests;
`RolloutBatch` (`batch.py`) is the columnar form that crosses every seam.

Every check (in `validation`) raises `InvalidRolloutError` naming the field (with the rollout's
index inside a batch) and the offending value. Token ids are stored as int32 and log-probs as
float32: vocabularies fit in 31 bits and behaviour log-probs never need more than single precision.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.data.columns import ROW_COLUMNS
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
    readonly,
)

__all__ = [
    "ANNOTATORS",
    "FINISH_REASONS",
    "MAX_TOKEN_ID",
    "Group",
    "InvalidRolloutError",
    "Rollout",
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
    row_id: int = -1

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
        set_(self, "row_id", as_int("row_id", self.row_id, minimum=-1))
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
            and self.task == other.task
            and all(getattr(self, c.field) == getattr(other, c.field) for c in ROW_COLUMNS)
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
