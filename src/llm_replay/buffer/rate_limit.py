"""Rate limiters: keep samples-per-insert (the replay ratio) inside a band by blocking the side
that runs ahead, with Reverb's semantics.

Let `diff = inserts * samples_per_insert - samples` (samples counted in rollouts drawn, inserts in
rollouts added). While the table holds fewer than `min_size_to_sample` rollouts, inserts always pass
and samples always wait. After that, an insert of `m` waits while `diff + m * spi > max_diff` and a
sample of `n` waits while `diff - n < min_diff`.

Because our calls move whole batches, the classic deadlock check (band >= 2 * max(1, spi)) is not
enough: if a blocked insert of `m` and a blocked sample of `n` can both be waiting, nothing ever
wakes them. That happens exactly when `max_diff - min_diff < m * spi + n`, so the limiter is built
knowing the largest insert and sample batch it must admit, rejects impossible settings at
construction, and rejects a call larger than declared instead of deadlocking on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class RateLimiterTimeout(TimeoutError):
    """A blocking insert or sample waited longer than its timeout."""


class TableClosed(RuntimeError):
    """The table was closed while (or before) a call waited on it."""


@dataclass
class RateLimiter:
    """The general limiter; use `MinSize` or `SampleToInsertRatio` to build one."""

    samples_per_insert: float = 1.0
    min_size_to_sample: int = 1
    min_diff: float = -math.inf
    max_diff: float = math.inf
    max_insert_batch: int = 1
    max_sample_batch: int = 1

    def __post_init__(self) -> None:
        spi = self.samples_per_insert
        if not (math.isfinite(spi) and spi > 0):
            raise ValueError(f"samples_per_insert = {spi!r}: must be finite and > 0")
        if isinstance(self.min_size_to_sample, bool) or int(self.min_size_to_sample) < 1:
            raise ValueError(f"min_size_to_sample = {self.min_size_to_sample!r}: must be >= 1")
        for name in ("max_insert_batch", "max_sample_batch"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} = {getattr(self, name)!r}: must be >= 1")
        if self.min_diff > self.max_diff:
            raise ValueError(f"min_diff = {self.min_diff} exceeds max_diff = {self.max_diff}")
        need = self.max_insert_batch * spi + self.max_sample_batch
        if self.max_diff - self.min_diff < need:
            raise ValueError(
                f"error band [{self.min_diff}, {self.max_diff}] is narrower than "
                f"max_insert_batch * samples_per_insert + max_sample_batch = {need}: a blocked "
                "insert and a blocked sample would wait for each other forever"
            )
        offset = spi * self.min_size_to_sample
        if self.min_diff > offset:
            raise ValueError(
                f"min_diff = {self.min_diff} is above samples_per_insert * min_size_to_sample = "
                f"{offset}: sampling would block forever once min_size_to_sample is reached"
            )

    # ----------------------------------------------------------------- decisions
    @property
    def bounded(self) -> bool:
        """Whether the band is finite (only then can batch sizes deadlock)."""
        return math.isfinite(self.max_diff - self.min_diff)

    def check_insert_size(self, m: int) -> None:
        if self.bounded and m > self.max_insert_batch:
            raise ValueError(
                f"insert of {m} rollouts exceeds the rate limiter's max_insert_batch = "
                f"{self.max_insert_batch} (declared so that no call can deadlock)"
            )

    def check_sample_size(self, n: int) -> None:
        if self.bounded and n > self.max_sample_batch:
            raise ValueError(
                f"sample of {n} rollouts exceeds the rate limiter's max_sample_batch = "
                f"{self.max_sample_batch} (declared so that no call can deadlock)"
            )

    def can_insert(self, m: int, size: int, inserts: int, samples: int) -> bool:
        if size + m < self.min_size_to_sample:
            return True
        return (inserts + m) * self.samples_per_insert - samples <= self.max_diff

    def can_sample(self, n: int, size: int, inserts: int, samples: int) -> bool:
        if size < self.min_size_to_sample:
            return False
        return inserts * self.samples_per_insert - samples - n >= self.min_diff

    def config(self) -> dict[str, Any]:
        return {
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": int(self.min_size_to_sample),
            "min_diff": _json_float(self.min_diff),
            "max_diff": _json_float(self.max_diff),
            "max_insert_batch": int(self.max_insert_batch),
            "max_sample_batch": int(self.max_sample_batch),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RateLimiter:
        values = dict(config)
        values["min_diff"] = float(values["min_diff"])
        values["max_diff"] = float(values["max_diff"])
        return cls(**values)


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def MinSize(min_size_to_sample: int) -> RateLimiter:
    """Block sampling until the table holds `min_size_to_sample` rollouts; never block inserts."""
    return RateLimiter(min_size_to_sample=min_size_to_sample)


def SampleToInsertRatio(
    samples_per_insert: float,
    min_size_to_sample: int,
    error_buffer: float | tuple[float, float],
    *,
    max_insert_batch: int = 1,
    max_sample_batch: int = 1,
) -> RateLimiter:
    """Hold samples-per-insert near `samples_per_insert`, within +-`error_buffer` rollouts.

    A scalar error buffer is centred on `samples_per_insert * min_size_to_sample`, so the ratio is
    measured from the moment sampling becomes possible (Reverb's convention); a pair is used as the
    absolute (min_diff, max_diff) band.
    """
    if isinstance(error_buffer, tuple):
        low, high = (float(x) for x in error_buffer)
    else:
        if not (math.isfinite(error_buffer) and error_buffer > 0):
            raise ValueError(f"error_buffer = {error_buffer!r}: must be finite and > 0")
        offset = samples_per_insert * min_size_to_sample
        low, high = offset - error_buffer, offset + error_buffer
    return RateLimiter(
        samples_per_insert=samples_per_insert,
        min_size_to_sample=min_size_to_sample,
        min_diff=low,
        max_diff=high,
        max_insert_batch=max_insert_batch,
        max_sample_batch=max_sample_batch,
    )
