"""How fast the machine was while a run ran: whether two runs' measured seconds can be compared.

Budgets are counts (the μ = 5 basis), so a run's steps do not depend on the machine's load, but
its measured seconds do: the demo runs its two trainings one after the other, and on a machine
shared with other work one of them can see ten times the load of the other (it printed 0.50× on
the μ = 5 basis and 5.57× in measured seconds). A run's own seconds cannot tell load from cost
(`auto`'s adaptive rollouts really do spend more per generated token: each of their small
stages pays a forward's fixed cost, `compute/generation_steps`), so a `SpeedProbe` times
a fixed piece of work, the same in every run, every few seconds on a thread beside the run; the
median of those timings is the machine's speed during the run, and `seconds_verdict` says whether
two runs saw the same machine. The probe costs well under 1% of a core (a few milliseconds every
`interval` seconds). The rejected alternative, running the two trainings interleaved, would make
their seconds comparable by construction, but doubles the demo's memory and mixes its progress.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

TOLERANCE = 1.25  # probe medians further apart than this: the seconds are not comparable


def _work(matrix: np.ndarray) -> float:
    """A fixed piece of work: a few small matrix products (single-threaded BLAS-sized)."""
    started = time.perf_counter()
    out = matrix
    for _ in range(8):
        out = np.tanh(out @ matrix)
    return time.perf_counter() - started


@dataclass
class SpeedProbe:
    """Times `_work` every `interval` seconds on a daemon thread while entered."""

    interval: float = 2.0
    samples: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval = {self.interval!r}: must be > 0 seconds")

    def __enter__(self) -> SpeedProbe:
        matrix = np.random.default_rng(0).standard_normal((96, 96)) / 10
        self.samples.append(_work(matrix))

        def sample() -> None:
            while not self._stop.wait(self.interval):
                self.samples.append(_work(matrix))

        self._thread = threading.Thread(target=sample, name="speed-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


def seconds_verdict(probes: dict[str, list[float]], tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Whether runs' measured seconds are comparable: the slowest run's median probe time over
    the fastest's, against `tolerance`. `probes`: each run's probe timings in seconds."""
    if not tolerance >= 1:
        raise ValueError(f"tolerance = {tolerance!r}: must be >= 1")
    medians = {name: statistics.median(v) for name, v in probes.items() if v}
    if len(medians) < 2:
        return {"comparable": None, "slowdown": None, "slowest": None, "medians": medians}
    slowest = max(medians, key=lambda n: medians[n])
    fastest = min(medians, key=lambda n: medians[n])
    slowdown = medians[slowest] / medians[fastest] if medians[fastest] > 0 else float("inf")
    return {
        "comparable": slowdown <= tolerance,
        "slowdown": slowdown,
        "slowest": slowest,
        "medians": medians,
    }
