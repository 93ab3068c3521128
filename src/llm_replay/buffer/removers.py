"""Removers: what stays in a table beyond its eviction bounds (Reverb's remover, for rollouts).

The eviction bounds (`buffer.eviction`) make room oldest-first and drop by age or reuse; a remover
adds a retention rule of its own. Before an insert it tells the table (`admit`) which stored
rollouts must leave and which incoming ones are dropped on arrival; the table evicts them with
reason "retention". `admit` sees the whole incoming batch, so a rule holds exactly whatever the
insert's width. A remover is independent of the sampler: positive-biased replay is a uniform
sampler over what `PositiveRetention` keeps.

| remover | keeps | source |
|---|---|---|
| (none) | what the eviction bounds allow, oldest leaving first | Reverb's FIFO remover |
| `PositiveRetention` | the freshest (1-δ)N rollouts plus the freshest δN correct older ones | 2604.08706 |

A remover registers by `name` (checkpoints rebuild it by that name) and keeps its own state in
named arrays, restored after the storage.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.storage import RolloutStorage
from llm_replay.data.batch import RolloutBatch

I64 = npt.NDArray[np.int64]

REMOVERS: dict[str, type[Remover]] = {}


class Remover(ABC):
    """Base class; a subclass with a `name` registers itself in REMOVERS."""

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if isinstance(name, str):
            if name in REMOVERS and REMOVERS[name] is not cls:
                raise ValueError(f"remover name {name!r} is taken by {REMOVERS[name].__name__}")
            REMOVERS[name] = cls

    def bind(self, storage: RolloutStorage) -> None:
        """Called once by the table, before any insert."""
        self.storage = storage

    @abstractmethod
    def admit(self, batch: RolloutBatch) -> tuple[I64, npt.NDArray[np.bool_] | None]:
        """Before `batch` is stored: stored slots to evict, and which incoming rows to keep
        (None: all). Called under the table's lock once the insert is admitted."""

    def on_insert(self, slots: I64) -> None:  # noqa: B027 - optional hook
        """The kept incoming rows are now at `slots`."""

    def on_remove(self, slots: I64) -> None:  # noqa: B027 - optional hook
        """Rollouts at `slots` are about to be freed, for whatever reason (still readable)."""

    def config(self) -> dict[str, Any]:
        """Constructor arguments, JSON-serialisable (checkpoint manifest)."""
        return {}

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:  # noqa: B027
        """Restore from `state_arrays` (storage is already restored)."""


class PositiveRetention(Remover):
    """Keep the freshest (1-δ)·N rollouts plus the freshest δ·N correct older ones.

    N is the table's `max_rollouts`. A rollout pushed out of the fresh window survives only if it is
    correct and among the δ·N freshest such survivors (arXiv 2604.08706, δ = 0.5 worked best).
    """

    name = "positive_biased"

    def __init__(self, delta: float = 0.5) -> None:
        if not (math.isfinite(delta) and 0 <= delta <= 1):
            raise ValueError(f"delta = {delta!r}: must be in [0, 1]")
        self.delta = float(delta)

    def bind(self, storage: RolloutStorage) -> None:
        super().bind(storage)
        self._set_capacities()
        # Queues of stable keys (a slot may be reused; its key never is), oldest first.
        self._fresh: deque[int] = deque()
        self._kept: deque[int] = deque()
        self._in_fresh = np.zeros(storage.capacity, dtype=bool)
        self._fresh_live = 0
        self._kept_live = 0
        self._arriving_kept = np.zeros(0, dtype=bool)  # set by admit, read by on_insert

    def _set_capacities(self) -> None:
        self.correct_capacity = round(self.delta * self.storage.capacity)
        self.fresh_capacity = self.storage.capacity - self.correct_capacity

    def set_delta(self, delta: float) -> None:
        """Change δ mid-run (a replay controller moving toward on-policy). Nothing leaves now:
        the next insert applies the new windows, evicting the oldest kept rollouts past δ·N."""
        if not (math.isfinite(delta) and 0 <= delta <= 1):
            raise ValueError(f"delta = {delta!r}: must be in [0, 1]")
        self.delta = float(delta)
        self._set_capacities()

    def _live_slot(self, key: int) -> int | None:
        slots, found = self.storage.slots_of(np.array([key]))
        return int(slots[0]) if found[0] else None

    def admit(self, batch: RolloutBatch) -> tuple[I64, npt.NDArray[np.bool_] | None]:
        """Apply the windows to (stored rollouts, then `batch`) in insertion order.

        The oldest fresh rollouts leave the fresh window first, stored ones before incoming ones;
        those that are correct join the kept queue, the rest go. Then the kept queue is cut to its
        capacity, oldest first. Incoming rows that leave the window within their own insert and
        are not kept are dropped on arrival; `on_insert` files the kept ones as kept.
        """
        n = len(batch)
        leaving = max(0, self._fresh_live + n - self.fresh_capacity)
        evict: list[int] = []
        while leaving > 0 and self._fresh:
            slot = self._live_slot(self._fresh.popleft())
            if slot is None:
                continue
            leaving -= 1
            # Out of the fresh window: counted as old whether kept or about to be evicted, so the
            # table's on_remove uncounts it from the right side.
            self._in_fresh[slot] = False
            self._fresh_live -= 1
            self._kept_live += 1
            if self.storage.correct[slot] == 1 and self.correct_capacity > 0:
                self._kept.append(int(self.storage.keys_of([slot])[0]))
            else:
                evict.append(slot)
        keep = np.ones(n, dtype=bool)
        incoming_kept = np.zeros(n, dtype=bool)
        early = np.arange(min(leaving, n))  # incoming rows already outside the fresh window
        incoming_kept[early] = np.asarray(batch.correct)[early] == 1
        keep[early] = incoming_kept[early]
        surplus = self._kept_live - len(evict) + int(incoming_kept.sum()) - self.correct_capacity
        while surplus > 0 and self._kept:
            slot = self._live_slot(self._kept.popleft())
            if slot is not None:
                evict.append(slot)
                surplus -= 1
        if surplus > 0:  # the stored kept queue is gone: the oldest incoming kept rows go too
            dropped = np.flatnonzero(incoming_kept)[:surplus]
            keep[dropped] = incoming_kept[dropped] = False
        self._arriving_kept = incoming_kept[keep]
        return np.asarray(evict, dtype=np.int64), keep

    def on_insert(self, slots: I64) -> None:
        kept, self._arriving_kept = self._arriving_kept, np.zeros(0, dtype=bool)
        if len(kept) != len(slots):  # pragma: no cover - the table always calls admit first
            kept = np.zeros(len(slots), dtype=bool)
        keys = self.storage.keys_of(slots)
        self._fresh.extend(keys[~kept].tolist())
        self._kept.extend(keys[kept].tolist())
        self._in_fresh[slots[~kept]] = True
        self._fresh_live += int((~kept).sum())
        self._kept_live += int(kept.sum())

    def on_remove(self, slots: I64) -> None:
        fresh = int(np.count_nonzero(self._in_fresh[slots]))
        self._fresh_live -= fresh
        self._kept_live -= len(slots) - fresh
        self._in_fresh[slots] = False

    def config(self) -> dict[str, Any]:
        return {"delta": self.delta}

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {
            "fresh": np.asarray(self._fresh, dtype=np.int64),
            "kept": np.asarray(self._kept, dtype=np.int64),
            "in_fresh": self._in_fresh.copy(),
            "counters": np.array([self._fresh_live, self._kept_live], np.int64),
        }

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        in_fresh, counters = arrays["in_fresh"], arrays["counters"]
        if in_fresh.shape != (self.storage.capacity,) or counters.shape != (2,):
            raise ValueError("remover in_fresh/counters: wrong shape")
        if int(in_fresh.sum()) != int(counters[0]) or int(counters.sum()) != self.storage.size:
            raise ValueError("remover counters: do not match the stored rollouts")
        self._fresh = deque(arrays["fresh"].tolist())
        self._kept = deque(arrays["kept"].tolist())
        self._in_fresh[:] = arrays["in_fresh"]
        self._fresh_live, self._kept_live = (int(x) for x in arrays["counters"])


def make_remover(name: str, **kwargs: Any) -> Remover:
    """Build a remover from its registry name (configs, checkpoints)."""
    try:
        cls = REMOVERS[name]
    except KeyError:
        raise ValueError(f"remover = {name!r}: expected one of {sorted(REMOVERS)}") from None
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ValueError(f"remover {name!r}: {error}") from None
