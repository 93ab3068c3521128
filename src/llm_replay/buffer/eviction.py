"""Eviction rules: what leaves the table, and why.

| reason | rule |
|---|---|
| `capacity_rollouts` | more than `max_rollouts` stored: the oldest leave first |
| `capacity_tokens` | more than `max_tokens` prompt + completion tokens stored: the oldest leave first |
| `max_age` | policy version - rollout's policy version > `max_age` (checked when the version advances and on insert) |
| `max_times_sampled` | a rollout drawn that many times leaves after the draw |
| `retention` | the sampler's own rule (positive-biased windows) |
| `removed` | the user called `remove(keys)` |

The token bound is what makes memory predictable for LLM rollouts, whose lengths vary 100x:
a rollout count alone bounds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.storage import RolloutStorage

I64 = npt.NDArray[np.int64]

REASONS: tuple[str, ...] = (
    "capacity_rollouts",
    "capacity_tokens",
    "max_age",
    "max_times_sampled",
    "retention",
    "removed",
)


def _positive_int(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} = {value!r}: must be a positive integer or None")
    return int(value)


@dataclass(frozen=True)
class EvictionPolicy:
    """Bounds on what a table keeps. `max_rollouts` is required; the rest are optional."""

    max_rollouts: int
    max_tokens: int | None = None
    max_age: int | None = None
    max_times_sampled: int | None = None

    def __post_init__(self) -> None:
        if _positive_int("max_rollouts", self.max_rollouts) is None:
            raise ValueError("max_rollouts is required")
        _positive_int("max_tokens", self.max_tokens)
        _positive_int("max_times_sampled", self.max_times_sampled)
        if self.max_age is not None and (
            isinstance(self.max_age, bool) or not isinstance(self.max_age, int) or self.max_age < 0
        ):
            raise ValueError(f"max_age = {self.max_age!r}: must be an integer >= 0 or None")

    def check_insert(self, rollouts: int, tokens: int) -> None:
        """Reject an insert that could never fit, before anything is evicted for it."""
        if rollouts > self.max_rollouts:
            raise ValueError(
                f"insert of {rollouts} rollouts exceeds max_rollouts = {self.max_rollouts}"
            )
        if self.max_tokens is not None and tokens > self.max_tokens:
            raise ValueError(f"insert of {tokens} tokens exceeds max_tokens = {self.max_tokens}")

    def for_capacity(self, storage: RolloutStorage, rollouts: int, tokens: int) -> tuple[I64, I64]:
        """Oldest slots to evict so `rollouts` more rollouts with `tokens` tokens fit."""
        over = storage.size + rollouts - self.max_rollouts
        by_count = storage.oldest(over) if over > 0 else np.zeros(0, dtype=np.int64)
        if self.max_tokens is None:
            return by_count, np.zeros(0, dtype=np.int64)
        freed = int(
            (storage.prompt_len[by_count].astype(np.int64) + storage.completion_len[by_count]).sum()
        )
        excess = storage.num_tokens - freed + tokens - self.max_tokens
        if excess <= 0:
            return by_count, np.zeros(0, dtype=np.int64)
        # Walk further back in age until enough tokens are freed.
        candidates = storage.oldest(len(by_count) + max(64, len(by_count)))
        while True:
            extra = candidates[len(by_count) :]
            sizes = storage.prompt_len[extra].astype(np.int64) + storage.completion_len[extra]
            reach = np.cumsum(sizes)
            enough = np.flatnonzero(reach >= excess)
            if enough.size or len(candidates) == storage.size:
                stop = int(enough[0]) + 1 if enough.size else len(extra)
                return by_count, extra[:stop]
            candidates = storage.oldest(min(storage.size, 2 * len(candidates)))

    def for_age(self, storage: RolloutStorage, version: int) -> I64:
        if self.max_age is None or storage.size == 0:
            return np.zeros(0, dtype=np.int64)
        live = storage.live_slots()
        return live[storage.policy_version[live] < version - self.max_age]

    def for_times_sampled(self, storage: RolloutStorage, slots: I64) -> I64:
        if self.max_times_sampled is None or len(slots) == 0:
            return np.zeros(0, dtype=np.int64)
        unique = np.unique(slots)
        return unique[storage.times_sampled[unique] >= self.max_times_sampled]
