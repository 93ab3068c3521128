"""From a scored round of groups to annotated preference pairs, with their reference log-probs.

`PairMaker.make` draws `pairs_per_group` disjoint pairs of each group's rollouts at random (seeded
by the group, so a resumed run draws the same), asks the annotator about all of them in one call,
and keeps the pairs it did not call a tie and whose two completions differ. A pair is stored as a
group of two rows, chosen first: its group id is `source group × pairs_per_group + k`, so the
group it came from is `group_id // pairs_per_group`; rewards are 1 and 0 (the preference), the
advantages ± the annotator's strength (its margin), `reward_versions` the annotator's version,
`annotators` who judged, `annotation_costs` half the pair's cost on each row, and
`reference_logprobs` each completion's summed log-prob under the reference policy, taken here
once so that a replayed pair needs no reference forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import ANNOTATORS
from llm_replay.learner import token_logprobs
from llm_replay.metrics import ComputeMeter
from llm_replay.preference.annotators import SafeAnnotator
from llm_replay.tasks.base import Problem


class ReferenceScorer:
    """Summed completion log-probs under the frozen reference policy (the initial weights), at
    the sampling temperature the policy's side of the loss uses."""

    def __init__(self, model: Any, *, temperature: float, micro_batch: int = 256) -> None:
        self.model = model.eval().requires_grad_(False)
        self.temperature = float(temperature)
        self.micro_batch = int(micro_batch)
        self.device = next(model.parameters()).device

    def sequence_logprobs(
        self, batch: RolloutBatch, meter: ComputeMeter | None = None
    ) -> np.ndarray:
        """[N] float64: Σ over each completion of log π_ref(token | prefix)."""
        sample = Sample.from_batch(batch, current_version=0)
        out = np.empty(len(batch), dtype=np.float64)
        for start in range(0, len(batch), self.micro_batch):
            rows = slice(start, start + self.micro_batch)
            out[rows] = sequence_logprobs(
                self.model, sample, rows, self.temperature, self.device, grad=False
            ).numpy()
        if meter is not None:
            meter.add(forward_only_tokens=sample.num_tokens)
        return out

    def token_logprobs(self, batch: RolloutBatch) -> np.ndarray:
        """[C] float32: log π_ref of every completion token, in the batch's flat order."""
        sample = Sample.from_batch(batch, current_version=0)
        out = np.zeros(sample.input_ids.shape, dtype=np.float32)
        for start in range(0, len(batch), self.micro_batch):
            rows = slice(start, start + self.micro_batch)
            values, _ = row_logprobs(
                self.model, sample, rows, self.temperature, self.device, grad=False
            )
            out[rows, : values.shape[1]] = values.float().cpu().numpy()
        return out[sample.loss_mask]


def row_logprobs(
    model: Any,
    sample: Sample,
    rows: slice | np.ndarray,
    temperature: float,
    device: Any,
    *,
    grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(input_ids[t] | input_ids[<t]) of `sample`'s `rows`, cut to their longest row
    (tempered logits, no truncation: finite for every token), with the rows' loss mask."""
    mask = sample.attention_mask[rows]
    width = int(mask.sum(1).max())
    ids = torch.from_numpy(np.ascontiguousarray(sample.input_ids[rows, :width])).long().to(device)
    attention = torch.from_numpy(np.ascontiguousarray(mask[:, :width])).long().to(device)
    loss_mask = torch.from_numpy(np.ascontiguousarray(sample.loss_mask[rows, :width])).to(device)
    with torch.set_grad_enabled(grad):
        return token_logprobs(model, ids, attention, temperature).tempered, loss_mask


def sequence_logprobs(
    model: Any,
    sample: Sample,
    rows: slice | np.ndarray,
    temperature: float,
    device: Any,
    *,
    grad: bool,
) -> torch.Tensor:
    """Σ_t log π(y_t | y_<t) over the completion tokens of `sample`'s `rows`, [len(rows)]
    float64."""
    logprobs, loss_mask = row_logprobs(model, sample, rows, temperature, device, grad=grad)
    with torch.set_grad_enabled(grad):
        total = (logprobs * loss_mask).sum(-1).double()
    return total if grad else total.cpu()


class PairMaker:
    """Annotated pairs from a round of fresh groups (see the module docstring)."""

    def __init__(
        self,
        annotator: SafeAnnotator,
        reference: ReferenceScorer,
        tokenizer: Any,
        *,
        pairs_per_group: int,
        seed: int,
    ) -> None:
        if annotator.name not in ANNOTATORS:
            raise ValueError(f"annotator {annotator.name!r}: not one of {ANNOTATORS}")
        self.annotator = annotator
        self.reference = reference
        self.tokenizer = tokenizer
        self.pairs_per_group = int(pairs_per_group)
        self.seed = int(seed)

    def candidates(self, batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first rows, second rows, pair group ids): disjoint random pairs within each group."""
        first: list[int] = []
        second: list[int] = []
        ids: list[int] = []
        for group in np.unique(batch.group_ids):
            rows = np.flatnonzero(batch.group_ids == group)
            order = np.random.default_rng([self.seed, int(group)]).permutation(rows)
            for k in range(min(self.pairs_per_group, len(rows) // 2)):
                first.append(int(order[2 * k]))
                second.append(int(order[2 * k + 1]))
                ids.append(int(group) * self.pairs_per_group + k)
        return (
            np.asarray(first, dtype=np.int64),
            np.asarray(second, dtype=np.int64),
            np.asarray(ids, dtype=np.int64),
        )

    def make(
        self,
        batch: RolloutBatch,
        problems: Sequence[Problem],
        meter: ComputeMeter,
        *,
        limit: int | None = None,
    ) -> tuple[RolloutBatch | None, dict[str, float]]:
        """The annotated pairs of `batch` (`problems[i]` is row i's problem), or None when there
        are none (every candidate tied, or the annotator failed). Two identical completions are
        not worth asking about and are never sent; `limit` caps the pairs asked (what is left of
        an annotation budget)."""
        first, second, pair_ids = self.candidates(batch)
        counts = self.annotator.counts
        before = dataclasses.replace(counts)
        texts = completion_texts(self.tokenizer, batch)
        differ = np.array(
            [texts[a] != texts[b] for a, b in zip(first, second, strict=True)], dtype=bool
        )
        counts.identical += int((~differ).sum())
        first, second, pair_ids = first[differ], second[differ], pair_ids[differ]
        if limit is not None:
            first, second, pair_ids = first[:limit], second[:limit], pair_ids[:limit]
        prompt_texts = self.tokenizer.batch_decode(
            [batch.prompt_ids[a:b] for a, b in _spans(batch.prompt_lengths)],
            skip_special_tokens=True,
        )
        scored_before = self.annotator.tokens_scored
        strengths = None
        if len(first):
            strengths = self.annotator.judge(
                [prompt_texts[i] for i in first],
                [problems[i] for i in first],
                [texts[i] for i in first],
                [texts[i] for i in second],
            )
        meter.add(reward_model_tokens=self.annotator.tokens_scored - scored_before)
        metrics: dict[str, float] = {}
        pairs: RolloutBatch | None = None
        if strengths is not None:
            keep = strengths != 0
            counts.ties += int((~keep).sum())
            counts.pairs += int(keep.sum())
            if keep.any():
                pairs = self._pairs(batch, first, second, pair_ids, strengths, keep, meter)
        meter.add(annotations=counts.requested - before.requested)
        meter.add(annotation_failures=counts.failures - before.failures)
        metrics["preference/pairs_made"] = float(counts.pairs - before.pairs)
        metrics["preference/ties"] = float(counts.ties - before.ties)
        metrics["preference/identical_skipped"] = float(counts.identical - before.identical)
        metrics["preference/annotation_failures"] = float(counts.failures)
        return pairs, metrics

    def _pairs(
        self,
        batch: RolloutBatch,
        first: np.ndarray,
        second: np.ndarray,
        pair_ids: np.ndarray,
        strengths: np.ndarray,
        keep: np.ndarray,
        meter: ComputeMeter,
    ) -> RolloutBatch:
        s = strengths[keep]
        chosen = np.where(s > 0, first[keep], second[keep])
        rejected = np.where(s > 0, second[keep], first[keep])
        rows = np.stack([chosen, rejected], 1).ravel()
        picked = batch.select(rows)
        n = len(chosen)
        margin = np.abs(s)
        return dataclasses.replace(
            picked,
            group_ids=np.repeat(pair_ids[keep], 2),
            rewards=np.tile([1.0, 0.0], n),
            advantages=np.stack([margin, -margin], 1).ravel(),
            reward_versions=np.full(2 * n, self.annotator.version, dtype=np.int64),
            reference_logprobs=self.reference.sequence_logprobs(picked, meter),
            annotators=np.full(2 * n, ANNOTATORS.index(self.annotator.name), dtype=np.uint8),
            annotation_costs=np.full(2 * n, self.annotator.cost / 2),
        )


def _spans(lengths: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(lengths)
    return [(int(e - n), int(e)) for e, n in zip(ends, lengths, strict=True)]


def completion_texts(tokenizer: Any, batch: RolloutBatch) -> list[str]:
    return list(
        tokenizer.batch_decode(
            [batch.completion_ids[a:b] for a, b in _spans(batch.completion_lengths)],
            skip_special_tokens=True,
        )
    )
