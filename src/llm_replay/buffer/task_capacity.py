"""`TaskCapacity`: a per-task (per-environment) share of the table's capacity, as a remover.

On a mixture of tasks, one environment's rollouts (the easy one's successes, under positive-biased
retention) can fill the whole table and push the hard environments out (issue #56). This remover
gives each task a cap of floor(share · N) rows (N = the table's `max_rollouts`): when an insert
would take a task past its cap, that task's oldest stored rows leave first (reason "retention",
like every remover's evictions); rows of one insert beyond their task's cap on their own are
dropped on arrival, the insert's earliest first, and get key -1.

Shares: `shares[name]` for a named task, else `share`, else 1/k with k the number of tasks stored
or arriving (equal shares of the table, so with one task the cap is N and nothing changes). Caps
are upper bounds, not reservations: shares may add up to more than 1, and a task below its cap
leaves its room to the others only up to their own caps. With shares adding up to at most 1 the
table's count bound never evicts; its token and byte bounds still evict oldest-first across tasks.

It composes with another remover (`inner`, e.g. `PositiveRetention`) rather than being a special
case of it: rows beyond their task's cap within the insert are dropped first, the inner remover
then admits what is left exactly as it would alone, and the caps are applied last to the stored
rows the inner remover keeps. Every eviction reaches the inner remover through `on_remove`, so
its own bookkeeping stays exact. Rejected alternative: a list of removers applied in turn, which
would need every remover to know what the earlier ones dropped from the incoming batch.

The per-task counts are derived from the storage (rebuilt on load); only the inner remover has
state of its own, saved under `inner.`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.removers import I64, Remover, make_remover
from llm_replay.buffer.storage import RolloutStorage
from llm_replay.data.batch import RolloutBatch

_EMPTY = np.zeros(0, dtype=np.int64)


def _share(field: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and 0 < value <= 1)
    ):
        raise ValueError(f"{field} = {value!r}: must be in (0, 1]")
    return float(value)


class TaskCapacity(Remover):
    """Each task keeps at most floor(share · N) rows, its oldest leaving first (see module doc).

    `share`: every task's share of N (None: 1/k for k tasks present); `shares`: per task name;
    `inner`: a remover applied within the caps (e.g. `PositiveRetention()`), or its saved
    `{"name": ..., "config": ...}`.
    """

    name = "task_capacity"

    def __init__(
        self,
        share: float | None = None,
        shares: Mapping[str, float] | None = None,
        inner: Remover | Mapping[str, Any] | None = None,
    ) -> None:
        self.share = None if share is None else _share("share", share)
        self.shares = {str(k): _share(f"shares[{k!r}]", v) for k, v in (shares or {}).items()}
        if isinstance(inner, Mapping):
            inner = make_remover(str(inner["name"]), **dict(inner.get("config", {})))
        if inner is not None and not isinstance(inner, Remover):
            raise TypeError(f"inner = {inner!r}: must be a Remover or None")
        if isinstance(inner, TaskCapacity):
            raise ValueError("inner: a TaskCapacity inside a TaskCapacity")
        self.inner = inner

    def bind(self, storage: RolloutStorage) -> None:
        super().bind(storage)
        self._count = np.zeros(1, dtype=np.int64)  # live rows per storage task code
        if self.inner is not None:
            self.inner.bind(storage)

    # ----------------------------------------------------------------- caps
    def caps(self, names: list[str]) -> dict[str, int]:
        """Each task's cap in rows, for the tasks `names` present."""
        n = self.storage.capacity
        default = self.share if self.share is not None else 1.0 / max(1, len(names))
        return {t: max(1, math.floor(self.shares.get(t, default) * n + 1e-9)) for t in names}

    def _stored_counts(self) -> dict[str, int]:
        names = self.storage.task_names
        return {names[c]: int(k) for c, k in enumerate(self._count.tolist()) if k > 0}

    def _oldest_of(self, code: int, need: int, excluded: I64) -> I64:
        """The `need` oldest live slots of task `code`, not in `excluded`."""
        st = self.storage
        window = max(64, 4 * need)
        while True:
            candidates = st.oldest(min(st.size, window))
            ok = st.task_code[candidates] == code
            if len(excluded):
                ok &= ~np.isin(candidates, excluded)
            picked: I64 = candidates[ok]
            if len(picked) >= need or len(candidates) >= st.size:
                return picked[:need]
            window *= 2

    # ----------------------------------------------------------------- remover
    def admit(self, batch: RolloutBatch) -> tuple[I64, npt.NDArray[np.bool_] | None]:
        n = len(batch)
        # Per row, its task name's index in `names` (a batch may spell one name twice).
        names = list(dict.fromkeys(batch.task_names))
        remap = np.array([names.index(t) for t in batch.task_names], dtype=np.int64)
        incoming = remap[np.asarray(batch.task_codes, dtype=np.int64)]
        stored = self._stored_counts()
        present = list(dict.fromkeys([*stored, *(names[i] for i in np.unique(incoming).tolist())]))
        caps = self.caps(present)
        keep = np.ones(n, dtype=bool)
        for index in np.unique(incoming).tolist():
            rows = np.flatnonzero(incoming == index)
            over = len(rows) - caps[names[index]]
            if over > 0:  # the insert alone overfills its task: its earliest rows go
                keep[rows[:over]] = False
        evict = _EMPTY
        if self.inner is not None:
            kept = np.flatnonzero(keep)
            evict, inner_keep = self.inner.admit(batch if keep.all() else batch.select(kept))
            evict = np.unique(np.asarray(evict, dtype=np.int64))
            evict = evict[self.storage.live[evict]]
            if inner_keep is not None:
                keep[kept[~inner_keep]] = False
        after = dict(stored)
        codes = self.storage.task_code[evict]
        for code, gone in zip(*np.unique(codes, return_counts=True), strict=True):
            after[self.storage.task_names[int(code)]] -= int(gone)
        for index, count in zip(*np.unique(incoming[keep], return_counts=True), strict=True):
            after[names[int(index)]] = after.get(names[int(index)], 0) + int(count)
        mine: list[I64] = []
        for name, count in after.items():
            over = count - caps[name]
            if over > 0:  # the incoming rows fit their cap, so stored rows of `name` exist
                code = self.storage.task_names.index(name)
                mine.append(self._oldest_of(code, over, evict))
        if mine:
            evict = np.concatenate([evict, *mine])
        return evict, None if keep.all() else keep

    def on_insert(self, slots: I64) -> None:
        self._add(slots, 1)
        if self.inner is not None:
            self.inner.on_insert(slots)

    def on_remove(self, slots: I64) -> None:
        self._add(slots, -1)
        if self.inner is not None:
            self.inner.on_remove(slots)

    def _add(self, slots: I64, sign: int) -> None:
        if len(slots) == 0:
            return
        codes = self.storage.task_code[slots].astype(np.int64)
        top = int(codes.max()) + 1
        if top > len(self._count):
            self._count = np.concatenate([self._count, np.zeros(top - len(self._count), np.int64)])
        np.add.at(self._count, codes, sign)

    # ----------------------------------------------------------------- state
    def config(self) -> dict[str, Any]:
        return {
            "share": self.share,
            "shares": dict(self.shares),
            "inner": None
            if self.inner is None
            else {"name": self.inner.name, "config": self.inner.config()},
        }

    def state_arrays(self) -> dict[str, np.ndarray]:
        if self.inner is None:
            return {}
        return {f"inner.{k}": v for k, v in self.inner.state_arrays().items()}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self._count = np.zeros(1, dtype=np.int64)
        self._add(self.storage.live_slots(), 1)
        inner = {k[6:]: v for k, v in arrays.items() if k.startswith("inner.")}
        if set(arrays) - {f"inner.{k}" for k in inner}:
            raise ValueError(f"remover: unexpected state arrays {sorted(arrays)}")
        if self.inner is not None:
            self.inner.load_state_arrays(inner)
        elif inner:
            raise ValueError("remover: inner state arrays saved for a TaskCapacity without one")
