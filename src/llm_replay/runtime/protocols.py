"""The seams between learner and generation: rollout workers and weight transfer.

The learner and the workers communicate only through the table (or its remote handle) and a
`WeightTransfer`. A runtime is a choice of implementations: threads in one process
(`ThreadWorker`, `InProcessWeights`) or Ray actors (`RayWorkerHandle`, weights in the object
store). Anything that satisfies these protocols — a vLLM server, say — can be plugged in the same
way.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass
class WorkerHealth:
    """A worker's own report: is it alive, which weights does it hold, what has it delivered."""

    worker: int
    alive: bool
    policy_version: int
    items_delivered: int
    rollouts_delivered: int
    busy_seconds: float
    idle_seconds: float
    restarts: int = 0
    error: str | None = None


@runtime_checkable
class RolloutWorker(Protocol):
    """A generation worker: pulls work, generates with its copy of the weights, delivers to the
    table."""

    index: int

    def start(self) -> None: ...

    def stop(self, timeout: float | None = None) -> None: ...

    def update_weights(self, version: int) -> bool:
        """Move to weights `version` if it is newer than the held one; True if they changed."""
        ...

    def health(self) -> WorkerHealth: ...


@runtime_checkable
class WeightTransfer(Protocol):
    """The learner publishes (state, version); workers fetch what is newer than what they hold."""

    @property
    def version(self) -> int: ...

    def publish(self, state: Mapping[str, torch.Tensor], version: int) -> None: ...

    def fetch(self, newer_than: int) -> tuple[int, dict[str, torch.Tensor]] | None: ...


class InProcessWeights:
    """Weight transfer between threads: the learner publishes a detached copy under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = -1
        self._state: dict[str, torch.Tensor] = {}

    @property
    def version(self) -> int:
        return self._version

    def publish(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        if version < self._version:
            raise ValueError(f"version = {version}: published versions only move forward")
        copy = {name: tensor.detach().clone() for name, tensor in state.items()}
        with self._lock:
            self._state, self._version = copy, int(version)

    def fetch(self, newer_than: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        with self._lock:
            if self._version <= newer_than:
                return None
            return self._version, self._state
