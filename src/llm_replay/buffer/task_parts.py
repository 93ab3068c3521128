"""`TaskParts`: the per-task table parts a table preset is built with (`replay.tasks`).

A method says which table it keeps (a preset: uniform, positive-biased, prioritized, ...); on a
mixture of tasks the user may want that same table with draws balanced across tasks
(`TaskBalanced`) and each task held to an equal share of the capacity (`TaskCapacity` around the
preset's own remover). Rather than a mixture variant of every method, the parts are applied to
whatever sampler and remover the preset chose, at the one place every preset builds its table,
so every method, runtime and front end gets them from the same setting.

Refused, by name: balanced draws over a sampler other than `Uniform` with replacement (within a
task `TaskBalanced` draws uniformly, so it would silently replace a prioritized or FIFO sampler).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_replay.buffer.samplers import Uniform
from llm_replay.buffer.task_capacity import TaskCapacity
from llm_replay.buffer.task_sampler import TaskBalanced


@dataclass(frozen=True)
class TaskParts:
    """`balance`: draw a task uniformly among those with live rows, then a row within it;
    `capacity`: each of the k tasks stored keeps at most N/k rows, its oldest leaving first."""

    balance: bool = False
    capacity: bool = False

    @property
    def active(self) -> bool:
        return self.balance or self.capacity

    def refusal(self, sampler: Any) -> str | None:
        """Why these parts cannot wrap `sampler` (None when they can)."""
        if not self.balance:
            return None
        if sampler is None:
            return None
        if type(sampler) is not Uniform or not sampler.with_replacement:
            return (
                f"replay.tasks.balance = true: draws within a task are uniform with replacement, "
                f"and this method's table draws with {type(sampler).__name__}"
                + ("" if sampler.with_replacement else " without replacement")
            )
        return None

    def wrap(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """`ReplayTable` arguments with the sampler and remover wrapped by the task parts."""
        if not self.active:
            return kwargs
        out = dict(kwargs)
        refusal = self.refusal(out.get("sampler"))
        if refusal is not None:
            raise ValueError(refusal)
        if self.balance:
            out["sampler"] = TaskBalanced()
        if self.capacity:
            out["remover"] = TaskCapacity(inner=out.get("remover"))
        return out
