"""What asynchronous runtimes share on the generation side: work items, the one worker body
(`make_item`: a thread and a Ray actor run the same code on an item) and exactly-once delivery.

Generation workers and the learner meet only at the table (`feeds.build_async_table`): its
rate limiter blocks whichever side runs ahead.

Work is handed out as `WorkItem`s (a slice of the run's prompt order plus the group ids to use),
so which prompts a run sees does not depend on which worker generated them. `IngestGate` makes the
insert of an item's rollouts and the record that the item was delivered one atomic step, and a
checkpoint takes the table and that record under the same lock. An item that was handed out but
not delivered when a checkpoint is taken (being generated, or waiting on the limiter) is saved as
outstanding and generated again after a resume: in-flight work is redone, never silently dropped
and never inserted twice.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.rate_limit import RateLimiterTimeout
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import TABLE_DIR
from llm_replay.metrics import ComputeMeter
from llm_replay.runtime.adaptive_rollouts import AdaptiveRollouts
from llm_replay.runtime.rollouts import RolloutMaker, prompt_indices

__all__ = [
    "TABLE_DIR",
    "Delivery",
    "IngestGate",
    "WorkItem",
    "WorkPlan",
    "WorkerError",
]


class WorkerError(RuntimeError):
    """A generation worker failed; the run stopped (its last checkpoint is intact)."""


@dataclass(frozen=True)
class WorkItem:
    """One unit of generation: prompts `prompt_start ..` of the run's order, groups from
    `first_group`."""

    item_id: int
    prompt_start: int
    first_group: int

    def indices(self, seed: int, num_prompts: int, count: int) -> np.ndarray:
        return prompt_indices(seed, num_prompts, self.prompt_start, count)


@dataclass
class ItemRollouts:
    """What a worker made of one work item: the scored rollouts, the maker's metrics, the
    compute it spent (its own meter, merged by whoever accounts for it), the reward-failure
    counts it added, and the seconds it took."""

    batch: RolloutBatch
    metrics: dict[str, float]
    meter: ComputeMeter
    reward_counts: dict[str, int]
    seconds: float


def make_item(
    maker: RolloutMaker,
    item: WorkItem,
    seed: int,
    prompts_per_item: int,
    adaptive: AdaptiveRollouts | None = None,
) -> ItemRollouts:
    """The one worker body of every asynchronous runtime (a thread or a Ray actor): one work
    item's prompts → generated, scored groups with their advantages. With `adaptive` (the
    worker's own, its kept completions a cache of what this worker has seen solved) the item is
    sampled in AR3PO's stages."""
    meter = ComputeMeter()
    counts_before = dict(vars(maker.scorer.counts))
    start = time.perf_counter()
    indices = item.indices(seed, len(maker.problems), prompts_per_item)
    batch, metrics = maker.make(indices, item.first_group, meter, adaptive)
    seconds = time.perf_counter() - start
    counts = {k: int(v) - counts_before[k] for k, v in vars(maker.scorer.counts).items()}
    return ItemRollouts(batch, metrics, meter, counts, seconds)


class WorkPlan:
    """Hands out work items to workers (thread-safe); items given back are handed out first."""

    def __init__(self, prompts_per_item: int) -> None:
        self.prompts_per_item = prompts_per_item
        self._lock = threading.Lock()
        self._next_id = 0
        self._prompts_drawn = 0
        self._issued: dict[int, WorkItem] = {}
        self._redo: deque[WorkItem] = deque()

    def take(self) -> WorkItem:
        with self._lock:
            if self._redo:
                item = self._redo.popleft()
            else:
                k = self.prompts_per_item
                item = WorkItem(self._next_id, self._prompts_drawn, self._prompts_drawn)
                self._next_id += 1
                self._prompts_drawn += k
            self._issued[item.item_id] = item
            return item

    def give_back(self, item: WorkItem) -> None:
        """The item will not be delivered by its worker (it died or stopped): hand it out again."""
        with self._lock:
            if self._issued.pop(item.item_id, None) is not None:
                self._redo.append(item)

    def complete(self, item_ids: list[int]) -> None:
        with self._lock:
            for item_id in item_ids:
                self._issued.pop(item_id, None)

    def state(self) -> dict[str, Any]:
        """Counters plus every item handed out and not delivered (call `complete` first)."""
        with self._lock:
            outstanding = sorted(
                [*self._issued.values(), *self._redo], key=lambda item: item.item_id
            )
            return {
                "next_id": self._next_id,
                "prompts_drawn": self._prompts_drawn,
                "outstanding": [asdict(item) for item in outstanding],
            }

    def load_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._next_id = int(state["next_id"])
            self._prompts_drawn = int(state["prompts_drawn"])
            self._issued = {}
            self._redo = deque(WorkItem(**item) for item in state["outstanding"])


@dataclass
class Delivery:
    """What one delivery cost: seconds blocked by the limiter and seconds inside the table."""

    rollouts: int
    idle_seconds: float
    table_seconds: float


class IngestGate:
    """Inserts an item's rollouts and marks the item delivered in one step; a checkpoint takes the
    table and the plan's outstanding items under the same lock, so they always agree."""

    def __init__(
        self,
        table: ReplayTable,
        plan: WorkPlan | None = None,
    ) -> None:
        self.table = table
        self.plan = plan
        self._lock = threading.Lock()
        self.delivered_rollouts = 0

    def deliver(
        self, batch: RolloutBatch, item_id: int, on_commit: Callable[[], None] | None = None
    ) -> Delivery:
        """Insert `batch` (blocking while the limiter holds workers back); TableClosed on close.

        `on_commit` runs under the gate's lock right after the insert (a worker adds the item's
        compute to the run's meter there, so a checkpoint never sees one without the other)."""
        n = len(batch)
        idle = 0.0
        while True:
            start = time.perf_counter()
            self.table.wait_for_insert(n)
            idle += time.perf_counter() - start
            start = time.perf_counter()
            with self._lock:
                try:
                    keys = self.table.insert(batch, timeout=0, token=item_id)
                except RateLimiterTimeout:  # another worker took the room first
                    continue
                if self.plan is not None:
                    self.plan.complete([item_id])
                if len(keys) == 0:  # delivered before (a retry after a lost answer)
                    return Delivery(0, idle, time.perf_counter() - start)
                self.delivered_rollouts += n
                if on_commit is not None:
                    on_commit()
            return Delivery(n, idle, time.perf_counter() - start)

    def save(
        self, directory: Path, snapshot: Callable[[], dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Save the table; returns the plan's state (its outstanding items), the ids of every
        item the saved table holds (its insert tokens, for a plan kept elsewhere) and
        `snapshot()`, all taken at the same instant as the table."""
        with self._lock:
            self.table.save(directory)
            out: dict[str, Any] = {"delivered_ids": self.table.insert_tokens().tolist()}
            if self.plan is not None:
                out["work_plan"] = self.plan.state()
            if snapshot is not None:
                out.update(snapshot())
            return out
