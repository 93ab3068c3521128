"""A snapshot of a replay table's contents and traffic, and its flat metrics for logging."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
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

    @property
    def samples_per_insert(self) -> float:
        """Observed replay ratio: rollouts drawn per rollout inserted."""
        return self.samples / self.inserts if self.inserts else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
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
        return out


def histogram(values: npt.NDArray[Any]) -> list[int]:
    clipped = np.minimum(np.maximum(values, 0), HISTOGRAM_BINS - 1)
    return [int(c) for c in np.bincount(clipped, minlength=HISTOGRAM_BINS)]


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
    )
