"""Which stored rollouts answer which prompt: the table's own per-prompt index.

Methods that work question by question (RLEP's success pool, ExGRPO, per-prompt statistics) need
the stored keys of a prompt. The table keeps that index itself so that no method keeps a second
copy that goes stale when the table evicts: it is built from the stored rows the first time it is
asked for, then kept in step with every insert and eviction, so a table that never asks pays
nothing. It is never persisted; a loaded table rebuilds it from its rows on first use.

A prompt is identified by `prompt_key`, a 16-byte digest of its token ids. Prompts are listed in
the order their oldest stored rollout arrived, and a prompt's keys in insertion order; both orders
follow from the contents alone, so a rebuilt index lists exactly what the live one did (a resumed
run's method draws what the uninterrupted run's would).
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.storage import RolloutStorage
from llm_replay.data.batch import RolloutBatch

I64 = npt.NDArray[np.int64]


def prompt_key(prompt_ids: npt.ArrayLike) -> bytes:
    """A 16-byte digest of a prompt's token ids (the identity of a question)."""
    return hashlib.blake2b(
        np.ascontiguousarray(prompt_ids, dtype=np.int32).tobytes(), digest_size=16
    ).digest()


def batch_prompt_keys(batch: RolloutBatch) -> list[bytes]:
    """`prompt_key` of every rollout of `batch`, in row order."""
    offsets = np.concatenate(([0], np.cumsum(batch.prompt_lengths, dtype=np.int64)))
    return [prompt_key(batch.prompt_ids[offsets[i] : offsets[i + 1]]) for i in range(len(batch))]


class PromptIndex:
    """prompt → keys of its stored rollouts, over one table's storage (the table's lock guards it)."""

    def __init__(self, storage: RolloutStorage) -> None:
        self.storage = storage
        self._keys: dict[bytes, dict[int, None]] = {}  # an insertion-ordered set of keys
        self._prompt_of: dict[int, bytes] = {}  # slot → prompt
        live = storage.live_in_order()
        if len(live):
            self.added(live, storage.gather_batch(live))

    def added(self, slots: I64, batch: RolloutBatch) -> None:
        """`batch`'s rows were stored at `slots` (same order)."""
        keys = self.storage.keys_of(slots).tolist()
        for slot, key, prompt in zip(slots.tolist(), keys, batch_prompt_keys(batch), strict=True):
            self._keys.setdefault(prompt, {})[key] = None
            self._prompt_of[slot] = prompt

    def removed(self, slots: I64) -> None:
        """The rollouts at `slots` are about to leave the storage (their keys still resolve)."""
        for slot, key in zip(slots.tolist(), self.storage.keys_of(slots).tolist(), strict=True):
            prompt = self._prompt_of.pop(slot, None)
            if prompt is None:
                continue
            keys = self._keys[prompt]
            keys.pop(key, None)
            if not keys:
                del self._keys[prompt]

    def keys(self, prompt: bytes) -> I64:
        return np.fromiter(self._keys.get(prompt, ()), dtype=np.int64)

    def prompts(self) -> list[bytes]:
        prompts = list(self._keys)
        oldest = np.fromiter((next(iter(self._keys[q])) for q in prompts), dtype=np.int64)
        arrival = self.storage.seq[np.mod(oldest, self.storage.capacity)]
        return [prompts[i] for i in np.argsort(arrival, kind="stable").tolist()]

    def __len__(self) -> int:
        return len(self._keys)
