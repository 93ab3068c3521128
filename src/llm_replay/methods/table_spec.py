"""What a method's table is, apart from the table: a `ReplayTable` preset and its arguments.

A method says what its table is (`ReplayMethod.table_spec(settings, context)`, a class method, so
no method needs to be built to know it) and whoever hosts the table builds it, once: the method
itself in a synchronous run or under TRL (on first use), the asynchronous runtime with the limiter
that couples workers and learner, or each Ray table shard. Before, the method built a table in its
constructor and the asynchronous runtime built another, and a Ray table actor built a whole
pipeline to get one. This is Reverb's table signature (sampler, remover, eviction limits, rate
limiter) with sampler and remover named by the preset; the contents, counters and RNG are the
table's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from llm_replay.buffer import RateLimiter, ReplayTable
from llm_replay.buffer.removers import make_remover
from llm_replay.buffer.samplers import make_sampler
from llm_replay.buffer.task_parts import TaskParts

Preset = Literal["queue", "uniform", "positive_biased", "prioritized", "table"]


@dataclass(frozen=True)
class TableSpec:
    """A table preset (`ReplayTable.<preset>`), its capacity and its other arguments; preset
    "table" is the plain constructor, with `sampler` and `remover` given as (registry name, its
    config), e.g. `TableSpec("table", 512, {"sampler": ("recency", {"half_life": 4.0})})`."""

    preset: Preset
    max_rollouts: int
    arguments: Mapping[str, Any] = field(default_factory=dict)
    tasks: TaskParts | None = None  # `replay.tasks`: per-task draws and capacity (the run's)

    def build(self, rate_limiter: RateLimiter | None = None) -> ReplayTable:
        """A new, empty table; `rate_limiter` replaces the preset's own (a queue keeps its)."""
        kwargs = dict(self.arguments)
        if rate_limiter is not None:
            kwargs["rate_limiter"] = rate_limiter
        if self.preset == "table":
            name, config = kwargs.pop("sampler", ("uniform", {}))
            remover = kwargs.pop("remover", None)
            if remover is not None:
                kwargs["remover"] = make_remover(remover[0], **remover[1])
            kwargs["sampler"] = make_sampler(name, **config)
            if self.tasks is not None:
                kwargs = self.tasks.wrap(kwargs)
            return ReplayTable(self.max_rollouts, **kwargs)
        if self.tasks is not None:
            kwargs["tasks"] = self.tasks
        table: ReplayTable = getattr(ReplayTable, self.preset)(self.max_rollouts, **kwargs)
        return table
