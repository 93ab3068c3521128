"""What a table hands the learner: padded arrays plus per-rollout bookkeeping.

A `Sample` is learner-ready (right-padded `input_ids`, aligned `behaviour_logprobs`, masks) and
carries what off-policy corrections and metrics need per rollout: key, age, times sampled, the
probability of the draw and the importance weight. It converts back to rollouts losslessly, so
mixtures and checkpoints never need a second copy of the payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from llm_replay.data.batch import RolloutBatch
from llm_replay.data.columns import ROW_COLUMNS
from llm_replay.data.rollout import Rollout

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class Sample:
    """A batch of B rollouts padded to width T (the longest in the batch).

    input_ids [B, T] int32: prompt then completion, then `pad_id`.
    behaviour_logprobs [B, T] float32: log-prob of input_ids[b, t] under the behaviour policy,
        0 outside the completion.
    attention_mask [B, T] bool: real tokens.   loss_mask [B, T] bool: completion tokens.
    Per rollout [B]: keys (-1 for rollouts that were never stored), ages (policy versions behind
    the table's version), times_sampled (including this draw), probabilities (of one draw),
    importance_weights, rewards, advantages (NaN if not computed), policy_versions, group_ids,
    prompt_lengths, completion_lengths, correct (-1 unknown), finish_reasons, sources (index of the
    table a mixture drew each rollout from, 0 otherwise), reward_versions (of the reward model
    that scored each rollout), and a preference pair's reference_logprobs, annotators and
    annotation_costs, and a front end's row_ids (`RolloutBatch`; the row columns are declared in `columns.ROW_COLUMNS`).
    """

    input_ids: I32
    behaviour_logprobs: F32
    attention_mask: B
    loss_mask: B
    keys: I64
    ages: I64
    times_sampled: npt.NDArray[np.int32]
    probabilities: F64
    importance_weights: F64
    rewards: F64
    advantages: F64
    policy_versions: I64
    group_ids: I64
    prompt_lengths: I32
    completion_lengths: I32
    correct: npt.NDArray[np.int8]
    finish_reasons: npt.NDArray[np.uint8]
    task_codes: npt.NDArray[np.int16]
    sources: npt.NDArray[np.int8]
    reward_versions: I64
    reference_logprobs: F64
    annotators: npt.NDArray[np.uint8]
    annotation_costs: F64
    row_ids: I64
    task_names: tuple[str, ...] = ("",)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to_batch(self) -> RolloutBatch:
        """The sampled rollouts in columnar form (payload copied out of the padded arrays)."""
        completion_mask = self.loss_mask
        return RolloutBatch(
            prompt_ids=self.input_ids[self.attention_mask & ~completion_mask],
            prompt_lengths=self.prompt_lengths.copy(),
            completion_ids=self.input_ids[completion_mask],
            completion_lengths=self.completion_lengths.copy(),
            behaviour_logprobs=self.behaviour_logprobs[completion_mask],
            task_codes=self.task_codes.copy(),
            task_names=self.task_names,
            allow_empty=True,
            **{c.name: getattr(self, c.name).copy() for c in ROW_COLUMNS},
        )

    def rollouts(self) -> list[Rollout]:
        return self.to_batch().rollouts()

    @classmethod
    def from_batch(
        cls,
        batch: RolloutBatch,
        *,
        current_version: int,
        keys: I64 | None = None,
        source: int = 0,
        pad_id: int = 0,
    ) -> Sample:
        """Wrap rollouts that did not come from a table (e.g. fresh ones in a mixture)."""
        n = len(batch)
        p = batch.prompt_lengths.astype(np.int64)
        c = batch.completion_lengths.astype(np.int64)
        lengths = p + c
        width = int(lengths.max()) if n else 0
        ar = np.arange(width)
        attention = ar < lengths[:, None]
        loss = attention & (ar >= p[:, None])
        ids = np.full((n, width), pad_id, dtype=np.int32)
        ids[attention & ~loss] = batch.prompt_ids
        ids[loss] = batch.completion_ids
        logprobs = np.zeros((n, width), dtype=np.float32)
        logprobs[loss] = batch.behaviour_logprobs
        return cls(
            input_ids=ids,
            behaviour_logprobs=logprobs,
            attention_mask=attention,
            loss_mask=loss,
            keys=np.full(n, -1, dtype=np.int64) if keys is None else keys,
            ages=current_version - batch.policy_versions,
            times_sampled=np.ones(n, dtype=np.int32),
            probabilities=np.ones(n),
            importance_weights=np.ones(n),
            prompt_lengths=batch.prompt_lengths,
            completion_lengths=batch.completion_lengths,
            task_codes=batch.task_codes,
            sources=np.full(n, source, dtype=np.int8),
            task_names=batch.task_names,
            **{c.name: getattr(batch, c.name) for c in ROW_COLUMNS},
        )

    @classmethod
    def concat(cls, samples: Sequence[Sample], pad_id: int = 0) -> Sample:
        """Stack samples row-wise, re-padding to the widest."""
        if not samples:
            raise ValueError("concat needs at least one sample")
        width = max(s.input_ids.shape[1] for s in samples)
        names: dict[str, int] = {}
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name == "task_names":
                continue
            parts = [getattr(s, f.name) for s in samples]
            if parts[0].ndim == 2:
                fill = pad_id if f.name == "input_ids" else 0
                parts = [_pad_to(x, width, fill) for x in parts]
            if f.name == "task_codes":
                parts = [
                    np.array([names.setdefault(n, len(names)) for n in s.task_names], np.int16)[
                        s.task_codes
                    ]
                    for s in samples
                ]
            values[f.name] = np.concatenate(parts)
        return cls(**values, task_names=tuple(names))  # type: ignore[arg-type]


def _pad_to(array: np.ndarray, width: int, fill: int) -> np.ndarray:
    if array.shape[1] == width:
        return array
    out = np.full((array.shape[0], width), fill, dtype=array.dtype)
    out[:, : array.shape[1]] = array
    return out
