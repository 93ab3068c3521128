"""Compose one training batch from several sources in set proportions.

- `Mixture`: fixed fractions of a batch from several tables (largest-remainder rounding).
- `FreshAnchored`: every fresh rollout plus round(ratio * fresh) replayed ones, the fresh batch
  then joining the replay table (rollout-level prioritized replay, arXiv 2606.04560).
- `RLEPBlend`: per group, G fresh rollouts plus M replayed verified successes of the same prompt,
  advantages standardised over all G + M (RLEP, arXiv 2507.07451).

Each returned `Sample` marks in `sources` which source every rollout came from.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.buffer.pool import SuccessPool
from llm_replay.buffer.sample import Sample
from llm_replay.buffer.table import ReplayTable
from llm_replay.rollout import RolloutBatch


def round_half_up(x: float) -> int:
    """round() as the papers mean it (Python's round() goes to even on .5)."""
    return math.floor(x + 0.5)


def split_counts(total: int, fractions: Sequence[float]) -> list[int]:
    """Integer counts summing to `total`, proportional to `fractions` (largest remainder)."""
    weights = np.asarray(fractions, dtype=np.float64)
    if weights.ndim != 1 or len(weights) == 0 or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"fractions = {list(fractions)}: need non-negative values, positive sum")
    exact = weights / weights.sum() * total
    counts = np.floor(exact).astype(int)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    return [int(c) for c in counts]


class Mixture:
    """Draw a batch from several tables in fixed proportions."""

    def __init__(self, sources: Sequence[tuple[ReplayTable, float]]) -> None:
        if not sources:
            raise ValueError("sources: a mixture needs at least one (table, fraction)")
        for index, (table, fraction) in enumerate(sources):
            if not isinstance(table, ReplayTable):
                raise TypeError(f"sources[{index}] = {table!r}: must be a ReplayTable")
            if not (math.isfinite(fraction) and fraction >= 0):
                raise ValueError(f"sources[{index}].fraction = {fraction!r}: must be >= 0")
        self.tables = [t for t, _ in sources]
        self.fractions = [float(f) for _, f in sources]
        split_counts(1, self.fractions)  # validates the fractions

    def sample(self, batch_size: int, *, timeout: float | None = None) -> Sample:
        counts = split_counts(batch_size, self.fractions)
        parts = []
        for index, (table, count) in enumerate(zip(self.tables, counts, strict=True)):
            if count:
                part = table.sample(count, timeout=timeout)
                parts.append(_with_source(part, index))
        return Sample.concat(parts)


class FreshAnchored:
    """Every fresh rollout, plus round(ratio * n_fresh) replayed from `replay`, then store fresh.

    Replayed rollouts are drawn *before* the fresh batch joins the table, so a batch never holds
    the same rollout twice. Early on the table may hold fewer than asked: all of it is used.
    """

    def __init__(self, replay: ReplayTable, ratio: float = 0.5) -> None:
        if not (math.isfinite(ratio) and ratio >= 0):
            raise ValueError(f"ratio = {ratio!r}: must be finite and >= 0")
        self.replay = replay
        self.ratio = float(ratio)

    def compose(self, fresh: RolloutBatch, *, timeout: float | None = None) -> Sample:
        fresh = RolloutBatch.coerce(fresh)
        wanted = round_half_up(self.ratio * len(fresh))
        take = min(wanted, self.replay.size)
        if not self.replay.sampler.with_replacement:
            take = min(take, self.replay.sampler.available())
        replayed = self.replay.sample(take, timeout=timeout) if take else None
        keys = self.replay.insert(fresh, timeout=timeout)
        parts = [Sample.from_batch(fresh, current_version=self.replay.policy_version, keys=keys)]
        if replayed is not None:
            parts.append(_with_source(replayed, 1))
        return Sample.concat(parts)


class RLEPBlend:
    """Per group: its G fresh rollouts plus up to M verified successes of the same prompt.

    Advantages of the blended group are recomputed over all G + M rewards with `estimator`
    (RLEP standardises over the union). Groups whose prompt has no stored success stay as they are.
    """

    def __init__(
        self, pool: SuccessPool, replay_per_group: int = 2, estimator: str = "grpo"
    ) -> None:
        if isinstance(replay_per_group, bool) or replay_per_group < 0:
            raise ValueError(f"replay_per_group = {replay_per_group!r}: must be >= 0")
        self.pool = pool
        self.m = int(replay_per_group)
        self.estimator = estimator

    def compose(self, fresh: RolloutBatch) -> RolloutBatch:
        fresh = RolloutBatch.coerce(fresh)
        groups = np.unique(fresh.group_ids)
        parts: list[RolloutBatch] = []
        sources: list[np.ndarray] = []
        for group in groups.tolist():
            members = fresh.select(np.flatnonzero(fresh.group_ids == group))
            parts.append(members)
            sources.append(np.zeros(len(members), dtype=np.int8))
            replayed = self.pool.draw(members.prompt_ids[: members.prompt_lengths[0]], self.m)
            if replayed is not None:
                relabelled = dataclasses.replace(
                    replayed, group_ids=np.full(len(replayed), group, np.int64)
                )
                parts.append(relabelled)
                sources.append(np.ones(len(replayed), dtype=np.int8))
        blended = RolloutBatch.concat(parts)
        advantages = group_advantages(blended.rewards, blended.group_ids, self.estimator)
        self.last_sources = np.concatenate(sources)
        return blended.with_advantages(advantages)


def _with_source(sample: Sample, source: int) -> Sample:
    return dataclasses.replace(sample, sources=np.full(len(sample), source, dtype=np.int8))
