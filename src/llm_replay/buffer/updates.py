"""The calls that change stored rollouts in place, as a part of `ReplayTable` (mixed in).

Priorities, scores, the policy version (which ages everything and evicts by `max_age`) and
explicit removal. Each public call validates its input, applies the change through an `_apply_*`
core under the table's lock and journals it (durable tables replay the same cores on reopen).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.arguments import keys_arg
from llm_replay.buffer.eviction import EvictionPolicy
from llm_replay.buffer.samplers import Prioritized, Sampler
from llm_replay.buffer.storage import RolloutStorage
from llm_replay.checks import integer

I64 = npt.NDArray[np.int64]


class TableUpdates:
    """In-place updates of a `ReplayTable` (see the module docstring)."""

    storage: RolloutStorage
    sampler: Sampler
    eviction: EvictionPolicy
    _cond: threading.Condition
    _version: int

    def _journal(self, op: str, **fields: Any) -> None:
        raise NotImplementedError

    def _evict(self, slots: I64, reason: str) -> None:
        raise NotImplementedError

    def update_priorities(self, keys: npt.ArrayLike, priorities: npt.ArrayLike) -> int:
        """Set priorities for stored keys; keys already evicted are skipped. Returns how many."""
        key_array = keys_arg(keys)
        try:
            values = np.asarray(priorities, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"priorities = {priorities!r}: not real numbers ({error})") from None
        if values.shape != key_array.shape:
            raise ValueError(f"priorities has shape {values.shape}, keys has {key_array.shape}")
        with self._cond:
            updated = self._apply_priorities(key_array, values)
            self._journal("priorities", keys=key_array, priorities=values)
            return updated

    def _apply_priorities(self, keys: I64, values: npt.NDArray[np.float64]) -> int:
        slots, found = self.storage.slots_of(keys)
        self.sampler.update_priorities(slots[found], values[found])
        return int(found.sum())

    def set_scores(
        self,
        keys: npt.ArrayLike,
        rewards: npt.ArrayLike,
        advantages: npt.ArrayLike,
        correct: npt.ArrayLike,
        reward_versions: npt.ArrayLike | None = None,
    ) -> int:
        """Replace stored rewards, advantages and correctness flags, and with `reward_versions`
        the version of the reward model that scored each (all or nothing; missing keys are
        skipped); a prioritized sampler re-prioritises by |advantage|. For re-scoring with a new
        reward function (`llm_replay.rescore`, `stale_rewards`). Returns how many rows changed."""
        key_array = keys_arg(keys)
        columns = [np.asarray(v, dtype=np.float64) for v in (rewards, advantages, correct)]
        for name, values in zip(("rewards", "advantages", "correct"), columns, strict=True):
            if values.shape != key_array.shape or not np.isfinite(values).all():
                raise ValueError(f"{name}: need {key_array.shape[0]} finite values, one per key")
        if not np.isin(columns[2], (-1, 0, 1)).all():
            raise ValueError("correct: flags must be -1 (unknown), 0 or 1")
        versions = None
        if reward_versions is not None:
            versions = np.asarray(reward_versions)
            if versions.shape != key_array.shape or versions.dtype.kind not in "iu":
                raise ValueError(
                    f"reward_versions: need {key_array.shape[0]} integers, one per key"
                )
            if versions.size and versions.min() < 0:
                raise ValueError("reward_versions: versions must be >= 0")
            versions = versions.astype(np.int64)
        extra = {} if versions is None else {"reward_versions": versions}
        with self._cond:
            changed = self._apply_scores(key_array, columns[0], columns[1], columns[2], versions)
            self._journal(
                "scores",
                keys=key_array,
                rewards=columns[0],
                advantages=columns[1],
                correct=columns[2],
                **extra,
            )
            return changed

    def _apply_scores(
        self, keys: I64, rewards: Any, advantages: Any, correct: Any, versions: Any = None
    ) -> int:
        slots, found = self.storage.slots_of(keys)
        hit = slots[found]
        self.storage.reward[hit] = rewards[found]
        self.storage.advantage[hit] = advantages[found]
        self.storage.correct[hit] = correct[found].astype(np.int8)
        if versions is not None:
            self.storage.reward_version[hit] = versions[found]
        if isinstance(self.sampler, Prioritized):
            self.sampler.update_priorities(hit, np.abs(advantages[found]))
        return len(hit)

    def set_policy_version(self, version: int) -> int:
        """Advance the learner's policy version; evicts rollouts past `max_age`. Returns evictions."""
        integer("version", version)
        with self._cond:
            if version < self._version:
                raise ValueError(
                    f"version = {version}: policy versions only move forward "
                    f"(table is at {self._version})"
                )
            evicted = self._apply_version(int(version))
            self._journal("version", version=int(version))
            self._cond.notify_all()
            return evicted

    def _apply_version(self, version: int) -> int:
        self._version = version
        stale = self.eviction.for_age(self.storage, self._version)
        self._evict(stale, "max_age")
        return len(stale)

    def remove(self, keys: npt.ArrayLike) -> int:
        """Remove stored rollouts by key (missing keys are ignored). Returns how many."""
        key_array = keys_arg(keys)
        with self._cond:
            removed = self._apply_remove(key_array)
            self._journal("remove", keys=key_array)
            self._cond.notify_all()
            return removed

    def _apply_remove(self, keys: I64) -> int:
        slots, found = self.storage.slots_of(keys)
        hit = np.unique(slots[found])
        self._evict(hit, "removed")
        return len(hit)
