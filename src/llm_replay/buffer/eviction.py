"""Eviction rules: what leaves the table, and why.

| reason | rule |
|---|---|
| `capacity_rollouts` | more than `max_rollouts` stored: the oldest leave first |
| `capacity_tokens` | more than `max_tokens` prompt + completion tokens stored: the oldest leave first |
| `capacity_bytes` | more than `max_bytes` payload bytes (4 per token id and per log-prob): the oldest leave first |
| `max_age` | policy version - rollout's policy version > `max_age` (checked when the version advances and on insert) |
| `max_times_sampled` | a rollout drawn that many times leaves after the draw |
| `retention` | the sampler's own rule (positive-biased windows) |
| `removed` | the user called `remove(keys)` |

The token and byte bounds are what make memory predictable for LLM rollouts, whose lengths vary
100x: a rollout count alone bounds nothing. `max_bytes` is the one that maps to RAM: a rollout of
P prompt and C completion tokens holds 4·(P + 2C) payload bytes (`RolloutStorage.payload_nbytes`),
and the arena that holds them never grows past about 1.125 × `max_bytes` (plus a guard of twice
the longest rollout); the fixed per-slot columns add about 100 bytes × `max_rollouts`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.storage import RolloutStorage
from llm_replay.checks import integer

I64 = npt.NDArray[np.int64]
_EMPTY = np.zeros(0, dtype=np.int64)

REASONS: tuple[str, ...] = (
    "capacity_rollouts",
    "capacity_tokens",
    "capacity_bytes",
    "max_age",
    "max_times_sampled",
    "retention",
    "removed",
)


def _positive_int(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    return integer(name, value, minimum=1)


@dataclass(frozen=True)
class EvictionPolicy:
    """Bounds on what a table keeps. `max_rollouts` is required; the rest are optional."""

    max_rollouts: int
    max_tokens: int | None = None
    max_age: int | None = None
    max_times_sampled: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if _positive_int("max_rollouts", self.max_rollouts) is None:
            raise ValueError("max_rollouts is required")
        _positive_int("max_tokens", self.max_tokens)
        _positive_int("max_times_sampled", self.max_times_sampled)
        _positive_int("max_bytes", self.max_bytes)
        if self.max_age is not None and (
            isinstance(self.max_age, bool)
            or not isinstance(self.max_age, int | np.integer)
            or self.max_age < 0
        ):
            raise ValueError(f"max_age = {self.max_age!r}: must be an integer >= 0 or None")

    def check_insert(self, rollouts: int, tokens: int, nbytes: int) -> None:
        """Reject an insert that could never fit, before anything is evicted for it."""
        if rollouts > self.max_rollouts:
            raise ValueError(
                f"insert of {rollouts} rollouts exceeds max_rollouts = {self.max_rollouts}"
            )
        if self.max_tokens is not None and tokens > self.max_tokens:
            raise ValueError(f"insert of {tokens} tokens exceeds max_tokens = {self.max_tokens}")
        if self.max_bytes is not None and nbytes > self.max_bytes:
            raise ValueError(f"insert of {nbytes} bytes exceeds max_bytes = {self.max_bytes}")

    def for_capacity(
        self, storage: RolloutStorage, rollouts: int, tokens: int, nbytes: int
    ) -> list[tuple[str, I64]]:
        """Oldest slots to evict so that `rollouts` more rollouts holding `tokens` tokens and
        `nbytes` payload bytes fit, each with the bound that evicts it (count, then tokens, then
        bytes: a rollout the count bound already frees is not counted twice)."""
        over = [max(0, storage.size + rollouts - self.max_rollouts), 0, 0]
        sized = [
            (1, self.max_tokens, storage.num_tokens + tokens, storage.rollout_tokens),
            (2, self.max_bytes, storage.payload_nbytes + nbytes, storage.rollout_nbytes),
        ]
        excess = {i: total - limit for i, limit, total, _ in sized if limit is not None}
        if any(e > 0 for e in excess.values()):
            candidates = storage.oldest(max(64, 2 * over[0]))
            while True:
                for i, _, _, size_of in sized:
                    if excess.get(i, 0) > 0:
                        reach = np.cumsum(size_of(candidates))
                        over[i] = int(np.searchsorted(reach, excess[i])) + 1
                if max(over) <= len(candidates) or len(candidates) == storage.size:
                    break
                candidates = storage.oldest(min(storage.size, 2 * len(candidates)))
        else:
            candidates = storage.oldest(over[0]) if over[0] else _EMPTY
        out: list[tuple[str, I64]] = []
        taken = 0
        for reason, count in zip(REASONS[:3], over, strict=True):
            count = min(count, len(candidates))
            if count > taken:
                out.append((reason, candidates[taken:count]))
                taken = count
        return out

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
