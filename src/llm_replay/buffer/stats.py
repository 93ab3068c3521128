"""A snapshot of a replay table's contents and traffic, and its flat metrics for logging."""

from __future__ import annotations

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
