"""ReplayTable: a thread-safe replay store for LLM rollouts (storage, sampler, remover, limiter).

The table is Reverb's table re-thought for language-model rollouts: variable-length payload in one
arena (see `storage`), capacity in rollouts *and* tokens, eviction by age in policy versions, and
samples that come out learner-ready (padded ids, behaviour log-probs, masks) with per-rollout
age, reuse count, draw probability and importance weight.

Every public call validates its input before touching state, so a bad call leaves the table as it
was: contents, counters and RNG. One condition variable guards everything; blocking calls (when
the rate limiter holds a side back) take a timeout and wake up when the table is closed.

No configuration can deadlock. Besides the limiter's own construction-time checks, the table
admits an insert whenever the sample side is *starved* — it holds fewer rollouts than the
largest sample it must serve (`min_size_to_sample`, or `max_sample_batch` for a sampler that
draws without replacement). Reverb's rule alone deadlocks there: after eviction by age, capacity
or retention empties the table, or when a batch insert crosses `min_size_to_sample` above the
band, a blocked insert and a blocked sample would wait for each other forever. Elsewhere the
limiter decides exactly as Reverb does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.arena import DiskArena, batch_nbytes
from llm_replay.buffer.arguments import (
    batch_size_arg,
    item_bound_args,
    pad_id_arg,
    timeout_arg,
    token_arg,
)
from llm_replay.buffer.checkpoint import CheckpointError, read_checkpoint_dir, write_atomic_dir
from llm_replay.buffer.durable import Journaled, OperationLog
from llm_replay.buffer.eviction import REASONS, EvictionPolicy
from llm_replay.buffer.gather import PinnedRows, increment
from llm_replay.buffer.kernels import apply_thread_environment
from llm_replay.buffer.presets import TablePresets
from llm_replay.buffer.prompt_index import PromptIndex
from llm_replay.buffer.rate_limit import MinSize, RateLimiter, RateLimiterTimeout, TableClosed
from llm_replay.buffer.removers import Remover
from llm_replay.buffer.rows import TableRows
from llm_replay.buffer.sample import Sample
from llm_replay.buffer.samplers import Sampler, Uniform
from llm_replay.buffer.stats import TableCounters, TableStats
from llm_replay.buffer.storage import RolloutStorage
from llm_replay.buffer.table_state import restore_table, table_arguments, table_state, table_stats
from llm_replay.buffer.updates import TableUpdates
from llm_replay.checks import integer
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.columns import ROW_COLUMNS
from llm_replay.data.rollout import Group, Rollout

logger = logging.getLogger(__name__)

I64 = npt.NDArray[np.int64]
T = TypeVar("T")


class ReplayTable(TablePresets, Journaled, TableRows, TableUpdates):
    """A replay table. Construct directly, or with a preset classmethod (`queue`, `uniform`, ...)."""

    def __init__(
        self,
        max_rollouts: int,
        *,
        sampler: Sampler | None = None,
        remover: Remover | None = None,
        max_tokens: int | None = None,
        max_age: int | None = None,
        max_times_sampled: int | None = None,
        max_bytes: int | None = None,
        rate_limiter: RateLimiter | None = None,
        seed: int = 0,
        name: str = "replay",
        arena_dir: str | Path | None = None,
        resident_budget: int = 64 << 20,
        max_items: int | None = None,
        groups_per_item: int | None = None,
    ) -> None:
        """`arena_dir`: keep the token arena in memory-mapped files there, so the table can hold
        more than RAM; about `resident_budget` bytes of it stay resident (`buffer.arena`).

        `max_items` with `groups_per_item`: an insert also waits while the table holds rows of
        `max_items` work items, an item being a block of `groups_per_item` consecutive group ids
        inserted whole (a run's intake queue under adaptive rollouts, whose items vary in rows:
        a bound in rows alone would let the workers run further ahead the smaller the items)."""
        self.eviction = EvictionPolicy(
            max_rollouts, max_tokens, max_age, max_times_sampled, max_bytes
        )
        self.sampler = sampler if sampler is not None else Uniform()
        if not isinstance(self.sampler, Sampler):
            raise TypeError(f"sampler = {self.sampler!r}: must be a Sampler")
        if remover is not None and not isinstance(remover, Remover):
            raise TypeError(f"remover = {remover!r}: must be a Remover or None")
        self.remover = remover
        self.rate_limiter = rate_limiter if rate_limiter is not None else MinSize(1)
        if not isinstance(self.rate_limiter, RateLimiter):
            raise TypeError(f"rate_limiter = {self.rate_limiter!r}: must be a RateLimiter")
        if self.rate_limiter.min_size_to_sample > max_rollouts:
            raise ValueError(
                f"rate_limiter.min_size_to_sample = {self.rate_limiter.min_size_to_sample} "
                f"exceeds max_rollouts = {max_rollouts}: sampling could never start"
            )
        if (
            not self.sampler.with_replacement
            and self.rate_limiter.bounded
            and self.rate_limiter.max_sample_batch > max_rollouts
        ):
            raise ValueError(
                f"rate_limiter.max_sample_batch = {self.rate_limiter.max_sample_batch} exceeds "
                f"max_rollouts = {max_rollouts} and the {self.sampler.name!r} sampler draws "
                "without replacement: such a sample could never be served"
            )
        integer("seed", seed, minimum=0)
        self.max_items, self.groups_per_item = item_bound_args(max_items, groups_per_item)
        self.name = str(name)
        self.seed = int(seed)
        apply_thread_environment()  # a bad LLM_REPLAY_GATHER_THREADS fails here, not mid-sample
        arena = None if arena_dir is None else DiskArena(arena_dir, resident_budget=resident_budget)
        self.storage = RolloutStorage(
            max_rollouts, max_tokens=max_tokens, max_bytes=max_bytes, arena=arena
        )
        self.sampler.bind(self.storage)
        if self.remover is not None:
            self.remover.bind(self.storage)
        self._rng = np.random.default_rng(seed)
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._version = 0
        self.counters = TableCounters()
        self._evictions = dict.fromkeys(REASONS, 0)
        self._log: OperationLog | None = None  # set by `open` (durable tables)
        self._tokens: set[int] = set()  # of idempotent inserts
        self._prompt_index: PromptIndex | None = None  # built on first use (`rows`)

    # ----------------------------------------------------------------- properties
    @property
    def size(self) -> int:
        return self.storage.size

    @property
    def num_tokens(self) -> int:
        return self.storage.num_tokens

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def max_rollouts(self) -> int:
        return self.eviction.max_rollouts

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return self.storage.size

    def __repr__(self) -> str:
        return (
            f"ReplayTable(name={self.name!r}, size={self.size}/{self.max_rollouts}, "
            f"tokens={self.num_tokens}, sampler={self.sampler.name!r}, "
            f"remover={None if self.remover is None else self.remover.name!r}, "
            f"version={self._version})"
        )

    # ----------------------------------------------------------------- insert
    def insert(
        self,
        rollouts: RolloutBatch | Group | Rollout | Sequence[Rollout],
        *,
        timeout: float | None = None,
        token: int | None = None,
    ) -> I64:
        """Add rollouts (all or nothing); returns their keys. Blocks while the limiter says so.

        Everything is checked before the table changes: a rejected insert leaves contents,
        counters and RNG as they were. A row that the remover's retention rule drops on arrival
        (positive-biased: an incorrect rollout that leaves the fresh window within its own
        insert) counts as inserted and evicted ("retention") and gets key -1.

        `token` makes the insert idempotent: an insert whose token the table has already taken
        changes nothing and returns no keys. Tokens are kept with the contents (checkpoints and
        the durable log), so a caller that does not know whether an insert landed before a crash
        can simply send it again.
        """
        batch = RolloutBatch.coerce(rollouts)
        wait = timeout_arg(timeout)
        token = token_arg(token)
        n = len(batch)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        tokens, nbytes = batch.num_tokens, batch_nbytes(batch)
        self.eviction.check_insert(n, tokens, nbytes)
        self.rate_limiter.check_insert_size(n)
        self.sampler.check_insert(batch)
        with self._cond:
            if token is not None and token in self._tokens:
                return EMPTY.copy()
            self._wait(lambda: self._can_insert(n), wait, f"insert of {n} rollouts")
            if token is not None and token in self._tokens:  # a concurrent duplicate won
                return EMPTY.copy()
            keys = self._apply_insert(batch)
            if token is None:
                self._journal("insert", batch=batch)
            else:
                self._tokens.add(token)
                self._journal("insert", batch=batch, token=token)
            self._cond.notify_all()
        return keys

    def insert_tokens(self) -> I64:
        """The tokens of every idempotent insert taken so far, sorted."""
        with self._cond:
            return np.array(sorted(self._tokens), dtype=np.int64)

    def has_token(self, token: int) -> bool:
        """Whether an insert with this `token` has been taken (see `insert`)."""
        checked = token_arg(token)
        with self._cond:
            return checked in self._tokens

    def _apply_insert(self, batch: RolloutBatch) -> I64:
        n = len(batch)
        keep = None
        if self.remover is not None:
            evict, keep = self.remover.admit(batch)
            self._evict(evict, "retention")
        stored = batch
        if keep is not None and not keep.all():
            stored = batch.select(np.flatnonzero(keep))
            self._evictions["retention"] += n - len(stored)
        for reason, slots in self.eviction.for_capacity(
            self.storage, len(stored), stored.num_tokens, batch_nbytes(stored)
        ):
            self._evict(slots, reason)
        slots = self.storage.add(stored, self._version) if len(stored) else EMPTY
        keys = np.full(n, -1, dtype=np.int64)
        # before any rule below can evict (and re-key) them
        keys[slice(None) if keep is None else keep] = self.storage.keys_of(slots)
        self.sampler.on_insert(slots)
        if self.remover is not None:
            self.remover.on_insert(slots)
        if self._prompt_index is not None:
            self._prompt_index.added(slots, stored)
        self.counters.inserts += n
        self.counters.insert_calls += 1
        if self.eviction.max_age is not None:
            stale = slots[
                self.storage.policy_version[slots] < self._version - self.eviction.max_age
            ]
            self._evict(stale, "max_age")
        return keys

    # ----------------------------------------------------------------- sample
    def sample(self, batch_size: int, *, timeout: float | None = None, pad_id: int = 0) -> Sample:
        """Draw `batch_size` rollouts as a learner-ready `Sample`. Blocks while the limiter says so."""
        pad = pad_id_arg(pad_id)
        pin, rows, columns = self._draw(batch_size, timeout, self._apply_sample)
        return self._gather(pin, rows, columns, pad)

    def sample_batch(self, batch_size: int, *, timeout: float | None = None) -> RolloutBatch:
        """Draw as `sample` does (same limiter, RNG, counts and evictions), the rows as a columnar
        `RolloutBatch`: for a caller that composes batches rather than trains on them (the intake
        queue of a run in rounds), so padding happens once, at the learner."""
        return self._draw(batch_size, timeout, self._apply_sample_rows)

    def _draw(self, batch_size: int, timeout: float | None, apply: Callable[[int], T]) -> T:
        n = batch_size_arg(batch_size)
        wait = timeout_arg(timeout)
        self.rate_limiter.check_sample_size(n)
        if not self.sampler.with_replacement and n > self.max_rollouts:
            raise ValueError(
                f"batch_size = {n} exceeds max_rollouts = {self.max_rollouts} and the "
                f"{self.sampler.name!r} sampler draws without replacement"
            )
        with self._cond:
            self._wait(lambda: self._can_sample(n), wait, f"sample of {n} rollouts")
            drawn = apply(n)
            self._journal("sample", n=n)
            self._cond.notify_all()
        return drawn

    def _apply_sample(self, n: int) -> tuple[int, PinnedRows, dict[str, Any]]:
        slots, probabilities = self.sampler.sample(n, self._rng)
        pin, rows = self.storage.pin(slots)
        columns = self._sample_columns(slots, probabilities, count=True)
        self._evict(self.eviction.for_times_sampled(self.storage, slots), "max_times_sampled")
        return pin, rows, columns

    def _apply_sample_rows(self, n: int) -> RolloutBatch:
        slots, probabilities = self.sampler.sample(n, self._rng)
        batch = self.storage.gather_batch(slots)
        self._sample_columns(slots, probabilities, count=True)
        self._evict(self.eviction.for_times_sampled(self.storage, slots), "max_times_sampled")
        return batch

    def _starved(self) -> bool:
        """The sample side cannot be served for lack of rollouts (so inserts must pass)."""
        need = self.rate_limiter.min_size_to_sample
        if not self.sampler.with_replacement and self.rate_limiter.bounded:
            need = max(need, self.rate_limiter.max_sample_batch)
        return self.sampler.available() < need

    def _can_insert(self, n: int) -> bool:
        c = self.counters
        if self.max_items is not None and self._items_held() >= self.max_items:
            return False  # the head item is whole, so the sample side is served without this one
        return self._starved() or self.rate_limiter.can_insert(n, self.size, c.inserts, c.samples)

    def _can_sample(self, n: int) -> bool:
        if self.size == 0:
            return False
        c = self.counters
        if not self.rate_limiter.can_sample(n, self.size, c.inserts, c.samples):
            return False
        return self.sampler.with_replacement or self.sampler.available() >= n

    def _sample_columns(
        self, slots: I64, probabilities: npt.NDArray[np.float64], *, count: bool
    ) -> dict[str, Any]:
        """Everything of a Sample but the padded arrays (read under the lock)."""
        st = self.storage
        if count:
            increment(st.times_sampled, slots)
        ages = self._version - st.policy_version[slots]
        if count and len(slots):
            self.counters.samples += len(slots)
            self.counters.sample_calls += 1
            self.counters.sampled_age_sum += int(ages.sum())
            self.counters.sampled_age_max = max(self.counters.sampled_age_max, int(ages.max()))
        return {
            "keys": st.keys_of(slots),
            "ages": ages,
            "times_sampled": st.times_sampled[slots],
            "probabilities": probabilities,
            "importance_weights": self.sampler.importance_weights(probabilities),
            "prompt_lengths": st.prompt_len[slots],
            "completion_lengths": st.completion_len[slots],
            "task_codes": st.task_code[slots],
            "sources": np.zeros(len(slots), dtype=np.int8),
            "task_names": tuple(st.task_names),
            **{c.name: getattr(st, c.field)[slots] for c in ROW_COLUMNS},
        }

    def _gather(self, pin: int, rows: PinnedRows, columns: dict[str, Any], pad_id: int) -> Sample:
        """Copy the pinned rows without the lock (inserts go on meanwhile), then unpin."""
        try:
            ids, logprobs, attention, loss = rows.gather(pad_id)
        finally:
            with self._cond:
                self.storage.unpin(pin)
        self.storage.arena_store.touched(ids.nbytes + logprobs.nbytes)
        return Sample(
            input_ids=ids,
            behaviour_logprobs=logprobs,
            attention_mask=attention,
            loss_mask=loss,
            **columns,
        )

    def _evict(self, slots: I64, reason: str) -> None:
        if len(slots) == 0:
            return
        unique = np.unique(slots)
        unique = unique[self.storage.live[unique]]  # two rules may pick the same rollout
        if len(unique) == 0:
            return
        self.sampler.on_remove(unique)
        if self.remover is not None:
            self.remover.on_remove(unique)
        if self._prompt_index is not None:
            self._prompt_index.removed(unique)
        self.storage.remove(unique)
        self._evictions[reason] += len(unique)

    # ----------------------------------------------------------------- blocking
    def wait_for_insert(self, n: int, *, timeout: float | None = None) -> bool:
        """Block until an insert of `n` rollouts would be admitted; False on timeout.

        With `insert(..., timeout=0)` this splits waiting (idle time) from inserting (table
        time), and lets a caller make the insert atomic with its own bookkeeping.
        """
        m = batch_size_arg(n)
        self.rate_limiter.check_insert_size(m)
        return self._try_wait(
            lambda: self._can_insert(m),
            timeout_arg(timeout),
            f"insert of {m} rollouts",
        )

    def wait_for_sample(self, n: int, *, timeout: float | None = None) -> bool:
        """Block until a sample of `n` rollouts would be admitted; False on timeout."""
        m = batch_size_arg(n)
        self.rate_limiter.check_sample_size(m)
        return self._try_wait(lambda: self._can_sample(m), timeout_arg(timeout), f"sample of {m}")

    def _try_wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> bool:
        with self._cond:
            try:
                self._wait(ready, timeout, what)
            except RateLimiterTimeout:
                return False
            return True

    def _wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                raise TableClosed(f"table {self.name!r} is closed ({what})")
            if ready():
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise RateLimiterTimeout(
                    f"{what} on table {self.name!r} timed out after {timeout}s: size={self.size}, "
                    f"inserts={self.counters.inserts}, samples={self.counters.samples}, "
                    f"samples_per_insert={self.rate_limiter.samples_per_insert}, "
                    f"band=[{self.rate_limiter.min_diff}, {self.rate_limiter.max_diff}]"
                )
            self._cond.wait(remaining)

    def close(self) -> None:
        """Refuse further calls and wake every blocked caller (they raise TableClosed); a durable
        table's log is flushed to disk and closed."""
        with self._cond:
            self._closed = True
            if self._log is not None:
                self._log.close()
            self._cond.notify_all()

    # ----------------------------------------------------------------- stats
    def stats(self) -> TableStats:
        with self._cond:
            return table_stats(self)

    # ----------------------------------------------------------------- checkpoints
    def save(self, path: str | Path) -> Path:
        """Write an atomic checkpoint directory (arrays + JSON manifest, no pickle)."""
        meta, arrays = self.state()
        return write_atomic_dir(Path(path), {"table": meta}, arrays)

    @classmethod
    def load(cls, path: str | Path) -> ReplayTable:
        """Rebuild a table from `save`; its future samples equal the original's."""
        path = Path(path)
        manifest, arrays = read_checkpoint_dir(path)
        try:
            return cls.from_state(manifest["table"], arrays)
        except CheckpointError:
            raise
        except Exception as error:  # any field of the wrong type, shape or range
            raise CheckpointError(
                f"{path}: inconsistent checkpoint ({type(error).__name__}: {error})"
            ) from None

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-serialisable manifest, named arrays) describing this table exactly."""
        with self._cond:
            return table_state(self)

    def state_unlocked(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """`state()` for a caller that holds the table's lock."""
        return table_state(self)

    @classmethod
    def from_state(
        cls, meta: dict[str, Any], arrays: dict[str, np.ndarray], **overrides: Any
    ) -> ReplayTable:
        """The table `state()` described; `overrides` set what a state does not carry (where
        the arena lives: `arena_dir`, `resident_budget`)."""
        table = cls(**{**table_arguments(meta), **overrides})
        restore_table(table, meta, arrays)
        return table


EMPTY = np.zeros(0, dtype=np.int64)
