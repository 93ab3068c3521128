"""Busy and idle time per role in an asynchronous run, and the rates that follow from them.

In the async runtimes generation workers and the learner run at once, so "how much compute" and
"how well are the devices used" are different questions. `RoleClock` answers the second: for each
role (`generator`, summed over workers, and `learner`) the seconds spent working and the seconds
spent blocked — generators by the rate limiter (the learner is behind), the learner waiting for
data (generation is behind) — plus the learner's seconds inside the table, rollouts in per second
and samples out per second over the run's wall time. The `ComputeMeter` still holds the cost
(busy seconds per role and counts, hence μ); this holds the utilisation.
"""

from __future__ import annotations

import threading
import time
from typing import Any

ASYNC_ROLES = ("generator", "learner")


class RoleClock:
    """Thread-safe busy/idle seconds per role, table seconds, and rollouts in / samples out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.busy = dict.fromkeys(ASYNC_ROLES, 0.0)
        self.idle = dict.fromkeys(ASYNC_ROLES, 0.0)
        self.table_seconds = dict.fromkeys(ASYNC_ROLES, 0.0)
        self.weight_sync_seconds = 0.0
        self.rollouts_in = 0
        self.samples_out = 0
        self.wall_seconds = 0.0
        self._started: float | None = None

    def start(self) -> None:
        with self._lock:
            self._started = time.perf_counter()

    def _check(self, role: str) -> None:
        if role not in self.busy:
            raise ValueError(f"role = {role!r}: choose one of {ASYNC_ROLES}")

    def add(
        self,
        role: str,
        *,
        busy: float = 0.0,
        idle: float = 0.0,
        table: float = 0.0,
        weight_sync: float = 0.0,
        rollouts_in: int = 0,
        samples_out: int = 0,
    ) -> None:
        self._check(role)
        with self._lock:
            self.busy[role] += busy
            self.idle[role] += idle
            self.table_seconds[role] += table
            self.weight_sync_seconds += weight_sync
            self.rollouts_in += rollouts_in
            self.samples_out += samples_out

    def elapsed(self) -> float:
        with self._lock:
            live = 0.0 if self._started is None else time.perf_counter() - self._started
            return self.wall_seconds + live

    def pause(self) -> None:
        """Stop the wall clock (the runtime stopped); `start` resumes it."""
        with self._lock:
            if self._started is not None:
                self.wall_seconds += time.perf_counter() - self._started
                self._started = None

    def metrics(self) -> dict[str, float]:
        wall = self.elapsed()
        with self._lock:
            out: dict[str, float] = {"async/wall_seconds": wall}
            for role in ASYNC_ROLES:
                busy, idle = self.busy[role], self.idle[role]
                out[f"async/{role}_busy_seconds"] = busy
                out[f"async/{role}_idle_seconds"] = idle
                out[f"async/{role}_idle_fraction"] = idle / (busy + idle) if busy + idle else 0.0
            learner_busy = self.busy["learner"]
            out["async/table_share_of_learner"] = (
                self.table_seconds["learner"] / learner_busy if learner_busy else 0.0
            )
            out["async/weight_sync_seconds"] = self.weight_sync_seconds
            out["async/rollouts_in_per_s"] = self.rollouts_in / wall if wall else 0.0
            out["async/samples_out_per_s"] = self.samples_out / wall if wall else 0.0
            out["async/samples_per_insert"] = (
                self.samples_out / self.rollouts_in if self.rollouts_in else 0.0
            )
            return out

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "busy": dict(self.busy),
                "idle": dict(self.idle),
                "table_seconds": dict(self.table_seconds),
                "weight_sync_seconds": self.weight_sync_seconds,
                "rollouts_in": self.rollouts_in,
                "samples_out": self.samples_out,
                "wall_seconds": self.wall_seconds
                + (0.0 if self._started is None else time.perf_counter() - self._started),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.busy = {r: float(state["busy"][r]) for r in ASYNC_ROLES}
            self.idle = {r: float(state["idle"][r]) for r in ASYNC_ROLES}
            self.table_seconds = {r: float(state["table_seconds"][r]) for r in ASYNC_ROLES}
            self.weight_sync_seconds = float(state["weight_sync_seconds"])
            self.rollouts_in = int(state["rollouts_in"])
            self.samples_out = int(state["samples_out"])
            self.wall_seconds = float(state["wall_seconds"])
            self._started = None
