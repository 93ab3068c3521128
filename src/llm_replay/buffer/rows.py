"""Reading stored rollouts by key, at the head and by prompt, as a part of `ReplayTable` (mixed in).

Two shapes come out of a table. A `Sample` is learner-ready (padded arrays plus per-rollout
bookkeeping) and is what `sample`, `take` and `get` return; a `RolloutBatch` is the rows
themselves, columnar and unpadded, and is what a caller that composes or indexes rollouts wants
(`get_batch`, `ReplayTable.sample_batch`), so that padding happens once, at the learner. The
per-prompt index (`buffer.prompt_index`) is the table's own, kept in step with its contents.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.arguments import keys_arg, pad_id_arg
from llm_replay.buffer.eviction import EvictionPolicy
from llm_replay.buffer.gather import PinnedRows
from llm_replay.buffer.prompt_index import PromptIndex, prompt_key
from llm_replay.buffer.sample import Sample
from llm_replay.buffer.samplers import Sampler
from llm_replay.buffer.storage import RolloutStorage
from llm_replay.data.batch import RolloutBatch

I64 = npt.NDArray[np.int64]
Found = npt.NDArray[np.bool_]


class TableRows:
    """Reads of a `ReplayTable` by key and by prompt (see the module docstring)."""

    storage: RolloutStorage
    eviction: EvictionPolicy
    sampler: Sampler
    _cond: threading.Condition
    _prompt_index: PromptIndex | None
    groups_per_item: int | None

    def _journal(self, op: str, **fields: Any) -> None:
        raise NotImplementedError

    def _evict(self, slots: I64, reason: str) -> None:
        raise NotImplementedError

    def _sample_columns(
        self, slots: I64, probabilities: npt.NDArray[np.float64], *, count: bool
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _gather(self, pin: int, rows: PinnedRows, columns: dict[str, Any], pad_id: int) -> Sample:
        raise NotImplementedError

    # ----------------------------------------------------------------- by key
    def get(self, keys: npt.ArrayLike, *, pad_id: int = 0) -> tuple[Sample, Found]:
        """Read stored rollouts by key without counting a sample; also returns which keys exist."""
        return self._by_key(keys, pad_id, count=False)

    def get_batch(self, keys: npt.ArrayLike) -> tuple[RolloutBatch, Found]:
        """The stored rollouts with these keys as rows (not counted as a sample, not padded);
        missing keys are skipped and the second value says which were found."""
        key_array = keys_arg(keys)
        with self._cond:
            slots, found = self.storage.slots_of(key_array)
            return self.storage.gather_batch(slots[found]), found

    def keys_scored_before(self, version: int) -> I64:
        """Keys of the stored rollouts whose reward came from a reward model older than
        `version`, in insertion order."""
        with self._cond:
            slots = self.storage.live_in_order()
            return self.storage.keys_of(slots[self.storage.reward_version[slots] < version])

    def contains(self, keys: npt.ArrayLike) -> Found:
        """Which of `keys` name rollouts still stored."""
        key_array = keys_arg(keys)
        with self._cond:
            return self.storage.slots_of(key_array)[1]

    def take(self, keys: npt.ArrayLike, *, pad_id: int = 0) -> tuple[Sample, Found]:
        """Draw the rollouts with these keys, counted like `sample` (times sampled, ages, eviction
        by `max_times_sampled`), for methods that choose rollouts themselves; missing keys are
        skipped and the second value says which were found."""
        return self._by_key(keys, pad_id, count=True)

    def _by_key(self, keys: Any, pad_id: int, *, count: bool) -> tuple[Sample, Any]:
        key_array, pad = keys_arg(keys), pad_id_arg(pad_id)
        with self._cond:
            pin, rows, columns, found = self._apply_take(key_array, count=count)
            if count:
                self._journal("take", keys=key_array)
                self._cond.notify_all()
        return self._gather(pin, rows, columns, pad), found

    def _apply_take(self, keys: I64, *, count: bool) -> tuple[int, PinnedRows, Any, Any]:
        slots, found = self.storage.slots_of(keys)
        hit = slots[found]
        pin, rows = self.storage.pin(hit)
        columns = self._sample_columns(hit, np.ones(len(hit)), count=count)
        if count:
            self._evict(self.eviction.for_times_sampled(self.storage, hit), "max_times_sampled")
        return pin, rows, columns, found

    # ----------------------------------------------------------------- at the head
    def head_rows(self, groups_per_block: int) -> int:
        """How many rows at the head of a FIFO table (those the next draw returns) have group ids
        in the same block of `groups_per_block` consecutive ids as the first: in a run's intake
        queue, whose work items each hold one such block and are inserted whole, the rows of the
        oldest item. 0 when the table is empty."""
        if isinstance(groups_per_block, bool) or not isinstance(groups_per_block, int):
            raise TypeError(f"groups_per_block = {groups_per_block!r}: expected an int")
        if groups_per_block < 1:
            raise ValueError(f"groups_per_block = {groups_per_block}: must be >= 1")
        if self.sampler.name != "fifo":
            raise ValueError(f"head_rows: the {self.sampler.name!r} sampler has no fixed head")
        with self._cond:
            blocks = self._blocks(groups_per_block)
            if len(blocks) == 0:
                return 0
            later = np.flatnonzero(blocks != blocks[0])
            return int(later[0]) if len(later) else len(blocks)

    def _items_held(self) -> int:
        """How many work items (blocks of `groups_per_item` consecutive group ids) the rows
        belong to; the caller holds the lock."""
        assert self.groups_per_item is not None
        return len(np.unique(self._blocks(self.groups_per_item)))

    def _blocks(self, groups_per_block: int) -> I64:
        """Each stored row's block of `groups_per_block` group ids, oldest row first."""
        slots = self.storage.oldest(self.storage.size)
        return self.storage.group_id[slots] // groups_per_block

    # ----------------------------------------------------------------- by prompt
    def keys_for_prompt(self, prompt: bytes | npt.ArrayLike) -> I64:
        """Keys of the stored rollouts of one prompt (its token ids, or their `prompt_key`),
        oldest first."""
        question = prompt if isinstance(prompt, bytes) else prompt_key(prompt)
        with self._cond:
            return self._prompts_locked().keys(question)

    def prompts(self) -> list[bytes]:
        """The `prompt_key` of every prompt with a stored rollout, in order of its oldest one."""
        with self._cond:
            return self._prompts_locked().prompts()

    @property
    def num_prompts(self) -> int:
        with self._cond:
            return len(self._prompts_locked())

    def _prompts_locked(self) -> PromptIndex:
        if self._prompt_index is None:
            self._prompt_index = PromptIndex(self.storage)
        return self._prompt_index
