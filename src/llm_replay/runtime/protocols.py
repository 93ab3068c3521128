"""The seams between learner and generation: rollout workers and weight transfer.

The learner and the workers communicate only through the table (or its remote handle) and a
`WeightTransfer`. A runtime is a choice of implementations: threads in one process
(`ThreadWorker`, `weights.InProcessWeights`) or Ray actors (`RayWorkerHandle`, weights in the object
store). Anything that satisfies these protocols — a vLLM server, say — can be plugged in the same
way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


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
    """The learner publishes a version; a worker pulls the weights into its own model when the
    published version is newer than the one it holds (see `runtime.weights`)."""

    @property
    def version(self) -> int: ...

    def publish(self, version: int) -> None: ...

    def pull(self, target: Any, held_version: int) -> int | None: ...
