"""`Groups`: whole groups (every stored rollout of one prompt instance), drawn uniformly.

A sampler of its own module: it indexes the table by group rather than by slot. It registers
itself with the other samplers by subclassing `Sampler`; the buffer package imports it.
"""

from __future__ import annotations

import numpy as np

from llm_replay.buffer.samplers import F64, I64, Sampler
from llm_replay.buffer.storage import RolloutStorage


class Groups(Sampler):
    """Whole groups, chosen uniformly without replacement, until the next would overflow `n`.

    For losses that need every rollout of a prompt together (group baselines recomputed at train
    time). A batch holds only whole groups, so it may hold fewer than `n` rollouts.
    """

    name = "groups"
    with_replacement = False

    def bind(self, storage: RolloutStorage) -> None:
        super().bind(storage)
        self._members: dict[int, list[int]] = {}
        self._order: list[int] = []
        self._pos: dict[int, int] = {}

    def on_insert(self, slots: I64) -> None:
        for slot, group in zip(slots.tolist(), self.storage.group_id[slots].tolist(), strict=True):
            members = self._members.get(group)
            if members is None:
                members = self._members[group] = []
                self._pos[group] = len(self._order)
                self._order.append(group)
            members.append(slot)

    def on_remove(self, slots: I64) -> None:
        for slot, group in zip(slots.tolist(), self.storage.group_id[slots].tolist(), strict=True):
            members = self._members[group]
            members.remove(slot)
            if not members:
                del self._members[group]
                pos = self._pos.pop(group)
                last = self._order.pop()
                if last != group:
                    self._order[pos] = last
                    self._pos[last] = pos

    def sample(self, n: int, rng: np.random.Generator) -> tuple[I64, F64]:
        chosen: list[int] = []
        for index in rng.permutation(len(self._order)).tolist():
            members = self._members[self._order[index]]
            if len(chosen) + len(members) > n:
                if not chosen:
                    continue
                break
            chosen.extend(members)
            if len(chosen) == n:
                break
        if not chosen:
            smallest = min(len(m) for m in self._members.values())
            raise ValueError(
                f"batch_size = {n} is smaller than every stored group (the smallest has "
                f"{smallest} rollouts); a group-aware batch holds whole groups"
            )
        slots = np.asarray(chosen, dtype=np.int64)
        return slots, np.full(len(slots), 1.0 / max(1, len(self._order)))

    def state_arrays(self) -> dict[str, np.ndarray]:
        rows = [(g, s) for g in self._order for s in self._members[g]]
        return {"members": np.asarray(rows, dtype=np.int64).reshape(-1, 2)}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.bind(self.storage)
        members = arrays["members"]
        slots = members[:, 1] if members.ndim == 2 and members.shape[1:] == (2,) else None
        if slots is None or not np.array_equal(np.sort(slots), np.sort(self.storage.live_slots())):
            raise ValueError("sampler members: must list every stored rollout once")
        for group, slot in members.tolist():
            if group not in self._members:
                self._members[group] = []
                self._pos[group] = len(self._order)
                self._order.append(group)
            self._members[group].append(slot)
