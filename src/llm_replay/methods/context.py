"""What a replay method knows of the run around it: the run's shape, its signals and the
services the front end lends (`MethodContext`), and the queue of a method that trains each
rollout once, sized from that shape (`queue_spec`). Apart from `methods.base` so the base holds
what a method is and this what it is given; the base re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from llm_replay.buffer.task_parts import TaskParts
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.signals import RunSignals
from llm_replay.methods.table_spec import TableSpec


class StoredRewards(Protocol):
    """The run's current learned reward model, for re-scoring stored rollouts (the front end
    that owns the model provides it and charges what it costs to the run's compute)."""

    @property
    def version(self) -> int: ...

    @property
    def success_threshold(self) -> float: ...

    def rescore(self, batch: RolloutBatch) -> np.ndarray:
        """The current model's rewards for `batch`'s rows; raises if the model fails."""
        ...


@dataclass
class RunServices:
    """What the front end lends a method beyond signals: set after the run's parts are built."""

    stored_rewards: StoredRewards | None = None


@dataclass(frozen=True)
class MethodContext:
    """What a method needs to know of the rest of the run: its shape, the run's signals
    (`methods.signals`), which the front end that hosts the method keeps up to date, and the
    services it lends (`RunServices`)."""

    batch_size: int
    rollouts_per_step: int
    group_size: int = 8
    seed: int = 0
    advantage: str = "grpo"
    tasks: TaskParts | None = None  # `replay.tasks`: the table's per-task parts, or none
    signals: RunSignals = field(default_factory=RunSignals, compare=False)
    services: RunServices = field(default_factory=RunServices, compare=False)


def queue_spec(context: MethodContext) -> TableSpec:
    """The FIFO queue of a method that trains on each rollout once, in generation order."""
    return TableSpec(
        "queue",
        context.rollouts_per_step + context.batch_size,
        {
            "max_insert_batch": context.rollouts_per_step,
            "max_sample_batch": context.batch_size,
            "seed": context.seed,
        },
    )
