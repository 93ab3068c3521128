"""Sharded replay tables under Ray: K table actors behind one front that keeps the replay ratio.

`workers.table_shards: K` runs the method's table as K table actors (`TableActor`), each holding
1/K of the capacity, behind a `ShardFront` actor that the driver delivers to and the learner
samples from:

- **Routing.** Work item `i` (a run of whole groups) goes to shard `i mod K`, so a group is never
  split and shards fill evenly.
- **Draws.** A batch of `n` is a mixture: shard sizes `s_k` split it multinomially with
  probabilities `s_k / sum(s)`, and each shard draws its part with its own sampler. For a uniform
  sampler that is exactly a uniform draw from the union; for a weighted sampler it is the mixture
  of the shards' distributions weighted by size (not by total priority), which the docs state.
- **The replay ratio is kept globally, by the front.** It holds the one limiter the unsharded
  table would have (`feeds.ratio_limiter`, over the total capacity) and admits every insert
  and every sample against global counts before forwarding it; shards only refuse to sample
  while empty. Per-shard limiters with the ratio split were rejected: random mixture draws make
  each shard's samples-per-insert a random walk that an item-routed insert stream cannot follow,
  so one shard's limiter eventually blocks the learner while the workers wait on another's.
- **Exactly once.** Inserts carry their work item's id as an idempotency token
  (`ReplayTable.insert(token=...)`), so a delivery whose answer was lost is simply sent again.
  With `workers.table_fsync` set, each shard keeps a durable log (`buffer.durable`) under the run
  directory and Ray restarts a dead shard (up to `workers.max_restarts` times), which recovers its
  contents, order and sampler state exactly; the front retries the calls that failed meanwhile.
- **Checkpoints.** The front saves every shard; an item counts as delivered iff its token is in
  its shard's saved table, so the work plan's outstanding items are exactly those to redo. The
  global counts are rebuilt from the shards' own counters on load or restart.

Only "table"-mode methods whose table is filled at the replay ratio are sharded (uniform,
positive-biased); `Config.check` refuses the rest with the reason (a rounds-mode method's table
lives with the learner, and the on-policy queue consumes each rollout once).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer import Sample
from llm_replay.buffer.rate_limit import TableClosed
from llm_replay.buffer.stats import TableStats, merge_stats
from llm_replay.config import Config, config_from_dict
from llm_replay.data.batch import RolloutBatch
from llm_replay.runtime.feeds import ratio_limiter

SHARD_DIR = "shard-{index}"
RETRY_SECONDS = 0.2


def shard_of(item_id: int, shards: int) -> int:
    """The shard that work item `item_id` (and every group in it) is inserted into."""
    return item_id % shards


def split_draws(n: int, sizes: npt.ArrayLike, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """How many of a batch of `n` each shard draws: multinomial in proportion to `sizes`."""
    weights = np.asarray(sizes, dtype=np.float64)
    if weights.ndim != 1 or weights.size == 0 or (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(f"sizes = {sizes!r}: need non-negative shard sizes, not all zero")
    return rng.multinomial(n, weights / weights.sum()).astype(np.int64)


def shard_key(keys: npt.NDArray[np.int64], shard: int, shards: int) -> npt.NDArray[np.int64]:
    """A shard's row keys in the sharded table's key space (`key * K + shard`, reversible)."""
    return keys * shards + shard


def shard_config(config: Config, index: int) -> dict[str, Any]:
    """The config a shard's table is built from: 1/K of the capacity and its own sampler seed."""
    shards = config.workers.table_shards
    out = config.to_dict()
    capacity = int(out["replay"]["capacity"])
    out["replay"]["capacity"] = max(config.train.batch_size, math.ceil(capacity / shards))
    out["train"]["seed"] = config.train.seed + 1_000_003 * index
    return out


def shard_dirs(run_dir: Path, shards: int) -> list[Path]:
    return [run_dir / "tables" / SHARD_DIR.format(index=k) for k in range(shards)]


class ShardFront:
    """The sharded table as one table: admission by the global limiter, routing, mixture draws.

    A threaded Ray actor: blocked delivers and samples wait on one condition variable, exactly as
    they do inside one `ReplayTable`."""

    def __init__(self, config: dict[str, Any], shards: list[Any]) -> None:
        cfg = config_from_dict(config)
        self.shards = list(shards)
        self.count = len(self.shards)
        self.rollouts_per_item = cfg.generation.rollouts_per_step
        self.max_restarts = cfg.workers.max_restarts
        self._cond = threading.Condition()
        self._closed = False
        self._rng = np.random.default_rng(cfg.train.seed + 17)
        stats = self._stats()
        self.limiter = ratio_limiter(cfg, sum(s.max_rollouts for s in stats))
        self._count_from(stats)

    # ------------------------------------------------------------------ shard calls
    def _until_alive(self, call: Callable[[int], Any]) -> Any:
        """`call(attempt)`, tried again while Ray restarts a dead shard (its durable log brings
        it back; inserts are idempotent, so a retried insert cannot double)."""
        from ray.exceptions import RayActorError

        tries = self.max_restarts * 50 + 1
        for attempt in range(tries):
            try:
                return call(attempt)
            except RayActorError:
                if self._closed or attempt == tries - 1:
                    raise
                time.sleep(RETRY_SECONDS)
        raise AssertionError("unreachable")

    def _get(self, shard: int, method: str, *args: Any) -> Any:
        """`ray.get(shards[shard].method(*args))`, through restarts."""
        import ray

        return self._until_alive(
            lambda _: ray.get(getattr(self.shards[shard], method).remote(*args))
        )

    def _on_all(self, method: str, *args: Any) -> list[Any]:
        """`method(*args)` on every shard at once; a shard that died is asked again."""
        import ray

        calls = [getattr(shard, method).remote(*args) for shard in self.shards]

        def answer(k: int) -> Any:
            return self._until_alive(
                lambda attempt: ray.get(
                    calls[k] if attempt == 0 else getattr(self.shards[k], method).remote(*args)
                )
            )

        return [answer(k) for k in range(self.count)]

    def _stats(self) -> list[TableStats]:
        return self._on_all("table_stats")

    def _count_from(self, stats: list[TableStats]) -> None:
        with self._cond:
            self.inserts = sum(s.inserts for s in stats)
            self.samples = sum(s.samples for s in stats)
            self.sizes = [s.size for s in stats]
            self._cond.notify_all()

    def _wait(self, ready: Any, what: str) -> float:
        start = time.perf_counter()
        while not (self._closed or ready()):
            self._cond.wait()
        if self._closed:
            raise TableClosed(f"sharded table is closed ({what})")
        return time.perf_counter() - start

    # ------------------------------------------------------------------ traffic
    def deliver(self, wrapped_batch: list[Any], item_id: int) -> dict[str, float]:
        """Admit and insert one work item's rollouts (`[batch_ref]`, so Ray does not fetch the
        rollouts here: the shard does)."""
        n, lim = self.rollouts_per_item, self.limiter
        with self._cond:
            idle = self._wait(
                lambda: (
                    sum(self.sizes) < lim.min_size_to_sample
                    or lim.can_insert(n, sum(self.sizes), self.inserts, self.samples)
                ),
                f"insert of {n} rollouts",
            )
            self.inserts += n
        shard = shard_of(item_id, self.count)
        start = time.perf_counter()
        out: dict[str, float] = self._get(shard, "deliver", wrapped_batch[0], item_id)
        with self._cond:
            self.inserts += int(out["rollouts"]) - n  # 0 rollouts for a duplicate
            self.sizes[shard] = int(out["size"])
            self._cond.notify_all()
        shard_idle = out["idle_seconds"]
        out["table_seconds"] = time.perf_counter() - start - shard_idle
        out["idle_seconds"] = shard_idle + idle
        return out

    def sample(self, batch_size: int) -> tuple[list[tuple[int, Any]], float]:
        """Admit a draw of `batch_size` and start it on the shards; returns (shard, sample ref)
        pairs for the learner to fetch directly, and the seconds the limiter held it back."""
        lim = self.limiter
        with self._cond:
            idle = self._wait(
                lambda: (
                    sum(self.sizes) > 0
                    and lim.can_sample(batch_size, sum(self.sizes), self.inserts, self.samples)
                ),
                f"sample of {batch_size}",
            )
            self.samples += batch_size
            counts = split_draws(batch_size, self.sizes, self._rng)
        chosen = [int(k) for k in np.flatnonzero(counts)]
        calls = {k: self._start_draw(k, int(counts[k])) for k in chosen}  # all shards at once
        parts = []
        for shard in chosen:
            sample_ref, size = self._finish_draw(shard, int(counts[shard]), calls[shard])
            parts.append((shard, sample_ref))
            with self._cond:
                self.sizes[shard] = size
        return parts, idle

    def _start_draw(self, shard: int, n: int) -> tuple[Any, Any]:
        refs: tuple[Any, Any] = self.shards[shard].sample_sized.options(num_returns=2).remote(n)
        return refs

    def _finish_draw(self, shard: int, n: int, refs: tuple[Any, Any]) -> tuple[Any, int]:
        """(sample ref, shard size), drawing again from a restarted shard if this one died."""
        import ray

        def draw(attempt: int) -> tuple[Any, int]:
            current = refs if attempt == 0 else self._start_draw(shard, n)
            return current[0], int(ray.get(current[1]))

        result: tuple[Any, int] = self._until_alive(draw)
        return result

    def set_policy_version(self, version: int) -> None:
        sizes = [int(size) for size in self._on_all("advance", version)]
        with self._cond:
            self.sizes = sizes
            self._cond.notify_all()

    # ------------------------------------------------------------------ state
    def table_stats(self) -> TableStats:
        return merge_stats(self._stats(), name="sharded")

    def stats(self) -> dict[str, float]:
        per_shard = self._stats()
        out = {k: float(v) for k, v in merge_stats(per_shard, "sharded").metrics().items()}
        with self._cond:
            out["async/limiter_diff"] = self.inserts * self.limiter.samples_per_insert - (
                self.samples
            )
        out["async/limiter_min_diff"] = float(self.limiter.min_diff)
        out["async/limiter_max_diff"] = float(self.limiter.max_diff)
        out["async/table_shards"] = float(self.count)
        sizes = [s.size for s in per_shard]
        out["async/shard_size_spread"] = float(max(sizes) - min(sizes))
        return out

    def save(self, directory: str) -> list[int]:
        """Save every shard under `directory`; returns the ids of every item the saved shards
        hold (an item is delivered iff its token is in its shard)."""
        delivered: list[int] = []
        for k in range(self.count):
            delivered += self._get(k, "save", str(Path(directory) / SHARD_DIR.format(index=k)))
        return sorted(delivered)

    def load(self, directory: str) -> None:
        for k in range(self.count):
            path = Path(directory) / SHARD_DIR.format(index=k)
            if not path.is_dir():
                raise FileNotFoundError(
                    f"{directory}: no {path.name} (checkpoint of a run with fewer table shards?)"
                )
            self._get(k, "load", str(path))
        self._count_from(self._stats())

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for shard in self.shards:
            shard.close.remote()  # not awaited: a dead shard has nothing to close


class ShardedClient:
    """The learner's `TableClient` for a `ShardFront`: fetches the shards' parts directly and
    stacks them (keys moved into the sharded key space, `shard_key`)."""

    def __init__(self, front: Any, shards: int) -> None:
        self.front, self.count = front, shards

    def sample(self, batch_size: int) -> tuple[Sample, float, float]:
        import ray

        call = time.perf_counter()
        parts, idle = ray.get(self.front.sample.remote(batch_size))
        samples = ray.get([ref for _, ref in parts])
        keyed = [
            dataclasses.replace(part, keys=shard_key(part.keys, shard, self.count))
            for (shard, _), part in zip(parts, samples, strict=True)
        ]
        sample = keyed[0] if len(keyed) == 1 else Sample.concat(keyed)
        return sample, idle, time.perf_counter() - call - idle

    def take_round(
        self, size: int, groups_per_item: int | None = None
    ) -> tuple[RolloutBatch, float, float]:
        raise RuntimeError(  # config checks refuse it first (`Config._check_shards`)
            "sharded tables serve the methods whose table the workers fill, not runs in rounds"
        )

    def set_policy_version(self, version: int) -> None:
        import ray

        ray.get(self.front.set_policy_version.remote(version))
