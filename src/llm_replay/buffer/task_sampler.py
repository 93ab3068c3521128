"""`TaskBalanced`: draws balanced across the tasks (environments) of a mixture.

On a mixture of tasks, replay that draws rows uniformly replays each environment in proportion to
the rows it holds, and positive-biased retention fills the table with the easy environments'
successes: the replayed batch drifts toward what the model already does well (issue #56). This
sampler draws each row in two steps: a task, uniformly (or by the given `weights`) among the
tasks that hold live rows, then a row uniformly within that task. A task is the table's existing
task column (`RolloutBatch.task_codes` / `task_names`, stored as `RolloutStorage.task_code`).

Decisions:
- With one live task it *is* `Uniform`: the same numpy calls on the same dense list of live
  slots, so a single-task table draws exactly the samples a `Uniform` table with the same seed
  draws (tested). The per-task index is consulted only when two or more tasks are live.
- Draws are with replacement only. Without replacement, a batch larger than the smallest task
  would have to fall back to another rule, and no caller needs it yet.
- Within a task the draw is uniform; wrapping another sampler's choice (prioritized within each
  task) would need one sum tree per task and is left for when a method asks for it.
- Importance weights: the point is to replay hard environments *more*, so by default none are
  applied (`beta = 0`, all weights 1). With `beta > 0` the weights are (N·P_i)^-β normalised by
  their maximum over the stored rows, as `Prioritized` reports them, for a caller that wants the
  balancing to reweight rather than to shift the replayed distribution.
- The index: per task, a dense array of its live slots and each slot's position in it, updated
  with vectorised swap-removes, like `RolloutStorage.dense`. Its order decides the draws, so a
  checkpoint saves it (a restored table draws what the original would have).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from llm_replay.buffer.samplers import F64, I64, Sampler
from llm_replay.buffer.storage import RolloutStorage


class TaskBalanced(Sampler):
    """A task uniformly (or by `weights`, keyed by task name; unnamed tasks weigh 1) among the
    tasks with live rows, then a row uniformly within it; with one live task, exactly `Uniform`.

    `beta`: importance weights (N·P_i)^-β / max (0: no correction, the default).
    """

    name = "task_balanced"
    with_replacement = True

    def __init__(self, weights: Mapping[str, float] | None = None, beta: float = 0.0) -> None:
        self.weights: dict[str, float] = {}
        for task, weight in (weights or {}).items():
            if not isinstance(task, str):
                raise ValueError(f"weights key {task!r}: must be a task name (str)")
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not (math.isfinite(weight) and weight > 0)
            ):
                raise ValueError(f"weights[{task!r}] = {weight!r}: must be finite and > 0")
            self.weights[task] = float(weight)
        if not (isinstance(beta, int | float) and math.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta = {beta!r}: must be finite and >= 0")
        self.beta = float(beta)

    def bind(self, storage: RolloutStorage) -> None:
        super().bind(storage)
        self._members: list[I64] = []  # per task code: its live slots in [:count]
        self._count = np.zeros(0, dtype=np.int64)
        self._pos = np.zeros(storage.capacity, dtype=np.int64)  # slot -> index in its task's list

    def _grow(self, codes: int) -> None:
        while len(self._members) < codes:
            self._members.append(np.zeros(0, dtype=np.int64))
        if len(self._count) < codes:
            self._count = np.concatenate(
                [self._count, np.zeros(codes - len(self._count), dtype=np.int64)]
            )

    def on_insert(self, slots: I64) -> None:
        if len(slots) == 0:
            return
        codes = self.storage.task_code[slots].astype(np.int64)
        self._grow(int(codes.max()) + 1)
        for code in np.unique(codes).tolist():
            new = slots[codes == code]
            count = int(self._count[code])
            members = self._members[code]
            if count + len(new) > len(members):
                grown = np.zeros(max(2 * len(members), count + len(new), 16), dtype=np.int64)
                grown[:count] = members[:count]
                members = self._members[code] = grown
            members[count : count + len(new)] = new
            self._pos[new] = np.arange(count, count + len(new))
            self._count[code] = count + len(new)

    def on_remove(self, slots: I64) -> None:
        if len(slots) == 0:
            return
        codes = self.storage.task_code[slots].astype(np.int64)
        for code in np.unique(codes).tolist():
            gone = np.unique(slots[codes == code])
            members, count, k = self._members[code], int(self._count[code]), len(gone)
            # Swap-remove, vectorised: the rows of the last k positions that stay fill the
            # holes the leaving rows leave before those positions.
            tail = members[count - k : count]
            fillers = tail[~np.isin(tail, gone)]
            holes = self._pos[gone]
            holes = holes[holes < count - k]
            members[holes] = fillers
            self._pos[fillers] = holes
            self._count[code] = count - k

    def _live_tasks(self) -> tuple[I64, F64]:
        """Codes of the tasks with live rows and their normalised draw weights."""
        codes = np.flatnonzero(self._count).astype(np.int64)
        names = self.storage.task_names
        w = np.array([self.weights.get(names[c], 1.0) for c in codes.tolist()], dtype=np.float64)
        return codes, w / w.sum()

    def sample(self, n: int, rng: np.random.Generator) -> tuple[I64, F64]:
        codes, w = self._live_tasks()
        size = self.storage.size
        if len(codes) <= 1:  # one task: exactly Uniform's draw
            picks = rng.integers(0, size, n)
            return self.storage.dense[picks].astype(np.int64), np.full(n, 1.0 / size)
        if self.weights:
            which = rng.choice(len(codes), n, p=w)
        else:
            which = rng.integers(0, len(codes), n)
        counts = self._count[codes]
        within = rng.integers(0, counts[which])
        slots = np.empty(n, dtype=np.int64)
        for i, code in enumerate(codes.tolist()):
            mask = which == i
            slots[mask] = self._members[code][within[mask]]
        return slots, w[which] / counts[which]

    def importance_weights(self, probabilities: F64) -> F64:
        if self.beta == 0 or len(probabilities) == 0:
            return np.ones(len(probabilities), dtype=np.float64)
        codes, w = self._live_tasks()
        p_min = float((w / self._count[codes]).min()) if len(codes) > 1 else 1.0 / self.storage.size
        return np.power(probabilities / p_min, -self.beta)

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.weights:
            out["weights"] = dict(self.weights)
        if self.beta:
            out["beta"] = self.beta
        return out

    def state_arrays(self) -> dict[str, np.ndarray]:
        counts = self._count.copy()
        parts = [self._members[c][: int(counts[c])] for c in range(len(counts))]
        members = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return {"counts": counts, "members": members.astype(np.int64)}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.bind(self.storage)
        counts, members = arrays["counts"], arrays["members"]
        st = self.storage
        if (
            counts.ndim != 1
            or members.ndim != 1
            or len(counts) > len(st.task_names)
            or (counts < 0).any()
            or int(counts.sum()) != len(members)
            or not np.array_equal(np.sort(members), np.sort(st.live_slots()))
            or not np.array_equal(st.task_code[members], np.repeat(np.arange(len(counts)), counts))
        ):
            raise ValueError("sampler members: must list every stored rollout once, by task")
        self._grow(len(counts))
        start = 0
        for code, count in enumerate(counts.tolist()):
            self._members[code] = members[start : start + count].astype(np.int64).copy()
            self._pos[self._members[code]] = np.arange(count)
            self._count[code] = count
            start += count
