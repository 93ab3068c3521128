"""A snapshot of a replay table's contents and traffic, and its flat metrics for logging.

Per-task stats (`TableStats.tasks`, issue #56) describe what each task (environment) of a mixture
holds. They are reported (`to_dict`, `metrics`) only when the table holds more than one task, so a
single-task table's output is what it always was; they are kept regardless, so merging shards
that each hold one task still adds up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

HISTOGRAM_BINS = 32
"""Age and reuse histograms count 0..30 exactly and put everything larger in the last bin."""


@dataclass
class TableCounters:
    """What a table has done since it was created: rollouts and calls in and out, sampled ages."""

    inserts: int = 0
    insert_calls: int = 0
    samples: int = 0
    sample_calls: int = 0
    sampled_age_sum: int = 0
    sampled_age_max: int = 0


@dataclass(frozen=True)
class TaskStats:
    """What one task (environment) holds in a table."""

    size: int  # rows held
    share: float  # of the table's rows
    age_mean: float  # policy versions behind the table's, over its rows
    correct_share: float  # of its rows marked correct (under positive retention, not a pass rate)


@dataclass(frozen=True)
class TableStats:
    """A snapshot of a table's contents and traffic."""

    name: str
    size: int
    max_rollouts: int
    num_tokens: int
    max_tokens: int | None
    max_bytes: int | None
    nbytes: int
    payload_nbytes: int
    stored_nbytes: int  # payload_nbytes less the prompts rows of a group share
    policy_version: int
    inserts: int
    insert_calls: int
    samples: int
    sample_calls: int
    evictions: dict[str, int]
    age_histogram: list[int]
    reuse_histogram: list[int]
    sampled_age_mean: float
    sampled_age_max: int
    tasks: dict[str, TaskStats] = field(default_factory=dict)  # by task name, rows held > 0

    @property
    def reports_tasks(self) -> bool:
        """Whether the per-task stats are reported: more than one task is held."""
        return len(self.tasks) > 1

    @property
    def samples_per_insert(self) -> float:
        """Observed replay ratio: rollouts drawn per rollout inserted."""
        return self.samples / self.inserts if self.inserts else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.reports_tasks:
            del out["tasks"]
        out["samples_per_insert"] = self.samples_per_insert
        return out

    def metrics(self, prefix: str = "buffer") -> dict[str, float]:
        """Flat, namespaced scalars for logging (`buffer/size`, `buffer/age_mean`, ...)."""
        stored = np.asarray(self.age_histogram)
        ages = np.arange(len(stored))
        out = {
            f"{prefix}/size": float(self.size),
            f"{prefix}/tokens": float(self.num_tokens),
            f"{prefix}/bytes": float(self.nbytes),
            f"{prefix}/payload_bytes": float(self.payload_nbytes),
            f"{prefix}/stored_bytes": float(self.stored_nbytes),
            f"{prefix}/inserts": float(self.inserts),
            f"{prefix}/samples": float(self.samples),
            f"{prefix}/samples_per_insert": self.samples_per_insert,
            f"{prefix}/stored_age_mean": float((stored * ages).sum() / max(1, stored.sum())),
            f"{prefix}/sampled_age_mean": self.sampled_age_mean,
            f"{prefix}/sampled_age_max": float(self.sampled_age_max),
        }
        reuse = np.asarray(self.reuse_histogram)
        times = np.arange(len(reuse))
        out[f"{prefix}/stored_reuse_mean"] = float((reuse * times).sum() / max(1, reuse.sum()))
        out[f"{prefix}/stored_never_sampled"] = float(reuse[0] / max(1, reuse.sum()))
        for reason, count in self.evictions.items():
            out[f"{prefix}/evicted_{reason}"] = float(count)
        if self.reports_tasks:
            for task, t in self.tasks.items():
                out[f"{prefix}/task/{task}/size"] = float(t.size)
                out[f"{prefix}/task/{task}/share"] = t.share
                out[f"{prefix}/task/{task}/age_mean"] = t.age_mean
                out[f"{prefix}/task/{task}/correct_share"] = t.correct_share
        return out


def histogram(values: npt.NDArray[Any]) -> list[int]:
    clipped = np.minimum(np.maximum(values, 0), HISTOGRAM_BINS - 1)
    return [int(c) for c in np.bincount(clipped, minlength=HISTOGRAM_BINS)]


def task_stats(
    names: Sequence[str], codes: npt.NDArray[Any], ages: npt.NDArray[Any], correct: npt.NDArray[Any]
) -> dict[str, TaskStats]:
    """Per-task stats of the rows whose task codes (into `names`), ages and correct flags these
    are; tasks holding no row are left out."""
    size = len(codes)
    held = np.bincount(codes, minlength=len(names))
    age_sum = np.bincount(codes, weights=ages, minlength=len(names))
    correct_sum = np.bincount(codes, weights=(correct == 1), minlength=len(names))
    return {
        names[c]: TaskStats(
            size=int(held[c]),
            share=float(held[c] / size),
            age_mean=float(age_sum[c] / held[c]),
            correct_share=float(correct_sum[c] / held[c]),
        )
        for c in np.flatnonzero(held).tolist()
    }


def _merge_tasks(parts: Sequence[TableStats]) -> dict[str, TaskStats]:
    sizes: dict[str, int] = {}
    ages: dict[str, float] = {}
    correct: dict[str, float] = {}
    for part in parts:
        for task, t in part.tasks.items():
            sizes[task] = sizes.get(task, 0) + t.size
            ages[task] = ages.get(task, 0.0) + t.age_mean * t.size
            correct[task] = correct.get(task, 0.0) + t.correct_share * t.size
    total = sum(sizes.values())
    return {
        task: TaskStats(
            size=n, share=n / total, age_mean=ages[task] / n, correct_share=correct[task] / n
        )
        for task, n in sizes.items()
    }


def merge_stats(parts: Sequence[TableStats], name: str) -> TableStats:
    """The stats of a table split in shards (`parts`), as if they were one table: counts and
    histograms add, capacities add (None if any shard has none), the sampled age is the
    draw-weighted mean and the newest policy version is the table's."""
    if not parts:
        raise ValueError("merge_stats: no shards")

    def total(field: str) -> int:
        return sum(int(getattr(p, field)) for p in parts)

    def capacity(field: str) -> int | None:
        values = [getattr(p, field) for p in parts]
        return None if any(v is None for v in values) else sum(values)

    evictions: dict[str, int] = {}
    for part in parts:
        for reason, count in part.evictions.items():
            evictions[reason] = evictions.get(reason, 0) + int(count)
    samples = total("samples")
    return TableStats(
        name=name,
        size=total("size"),
        max_rollouts=total("max_rollouts"),
        num_tokens=total("num_tokens"),
        max_tokens=capacity("max_tokens"),
        max_bytes=capacity("max_bytes"),
        nbytes=total("nbytes"),
        payload_nbytes=total("payload_nbytes"),
        stored_nbytes=total("stored_nbytes"),
        policy_version=max(p.policy_version for p in parts),
        inserts=total("inserts"),
        insert_calls=total("insert_calls"),
        samples=samples,
        sample_calls=total("sample_calls"),
        evictions=evictions,
        age_histogram=[int(x) for x in np.sum([p.age_histogram for p in parts], axis=0)],
        reuse_histogram=[int(x) for x in np.sum([p.reuse_histogram for p in parts], axis=0)],
        sampled_age_mean=sum(p.sampled_age_mean * p.samples for p in parts) / max(1, samples),
        sampled_age_max=max(p.sampled_age_max for p in parts),
        tasks=_merge_tasks(parts),
    )
