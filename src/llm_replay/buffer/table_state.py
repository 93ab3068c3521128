"""A table's exact state as a JSON manifest plus named arrays, and back (no pickle); its stats.

Kept apart from `table.py` so the table's concurrency (locks, pins, waits) reads on its own; the
caller holds the table's lock while `table_state` and `table_stats` run.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Protocol

import numpy as np

from llm_replay.buffer.eviction import REASONS, EvictionPolicy
from llm_replay.buffer.rate_limit import RateLimiter
from llm_replay.buffer.removers import PositiveRetention, Remover, make_remover
from llm_replay.buffer.samplers import Sampler, Uniform, make_sampler
from llm_replay.buffer.stats import TableCounters, TableStats, histogram, task_stats
from llm_replay.buffer.storage import RolloutStorage


class TableParts(Protocol):
    """What of a `ReplayTable` its state and stats are made of."""

    name: str
    seed: int
    eviction: EvictionPolicy
    sampler: Sampler
    remover: Remover | None
    rate_limiter: RateLimiter
    max_items: int | None
    groups_per_item: int | None
    storage: RolloutStorage
    counters: TableCounters
    _rng: np.random.Generator
    _version: int
    _evictions: dict[str, int]
    _tokens: set[int]

    @property
    def max_rollouts(self) -> int: ...


def table_state(table: TableParts) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    meta = {
        "name": table.name,
        "seed": table.seed,
        "eviction": asdict(table.eviction),
        "sampler": {"name": table.sampler.name, "config": table.sampler.config()},
        "remover": None
        if table.remover is None
        else {"name": table.remover.name, "config": table.remover.config()},
        "rate_limiter": table.rate_limiter.config(),
        "max_items": table.max_items,
        "groups_per_item": table.groups_per_item,
        "rng": table._rng.bit_generator.state,
        "counters": {"version": table._version, **asdict(table.counters)},
        "evictions": dict(table._evictions),
        "storage": table.storage.state_meta(),
    }
    arrays = {f"storage.{k}": v for k, v in table.storage.state_arrays().items()}
    arrays.update({f"sampler.{k}": v for k, v in table.sampler.state_arrays().items()})
    if table.remover is not None:
        arrays.update({f"remover.{k}": v for k, v in table.remover.state_arrays().items()})
    arrays["insert_tokens"] = np.array(sorted(table._tokens), dtype=np.int64)
    return meta, arrays


def table_arguments(meta: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments of the table `meta` describes."""
    eviction = meta["eviction"]
    sampler, remover = _sampler_and_remover(meta)
    return {
        "max_rollouts": eviction["max_rollouts"],
        "sampler": sampler,
        "remover": remover,
        "max_tokens": eviction["max_tokens"],
        "max_age": eviction["max_age"],
        "max_times_sampled": eviction["max_times_sampled"],
        "max_bytes": eviction.get("max_bytes"),
        "rate_limiter": RateLimiter.from_config(meta["rate_limiter"]),
        "seed": meta["seed"],
        "name": meta["name"],
        "max_items": meta.get("max_items"),  # absent from tables saved before the item bound
        "groups_per_item": meta.get("groups_per_item"),
    }


LEGACY_POSITIVE = "positive_biased"  # the sampler that was also a remover, before removers


def _sampler_and_remover(meta: dict[str, Any]) -> tuple[Sampler, Remover | None]:
    """A table saved before removers had a "positive_biased" sampler that was both: it comes
    back as the uniform sampler plus `PositiveRetention`, its state moved to the remover."""
    name, config = meta["sampler"]["name"], dict(meta["sampler"]["config"])
    if name == LEGACY_POSITIVE:
        return Uniform(config.pop("replacement", True)), PositiveRetention(**config)
    remover = meta.get("remover")
    return (
        make_sampler(name, **config),
        None if remover is None else make_remover(remover["name"], **remover["config"]),
    )


def restore_table(table: TableParts, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Load contents, sampler and remover state, RNG and counters into a freshly built `table`."""
    legacy = meta["sampler"]["name"] == LEGACY_POSITIVE
    storage_arrays = {k[8:]: v for k, v in arrays.items() if k.startswith("storage.")}
    sampler_arrays = {k[8:]: v for k, v in arrays.items() if k.startswith("sampler.")}
    remover_arrays = {k[8:]: v for k, v in arrays.items() if k.startswith("remover.")}
    if legacy:
        sampler_arrays, remover_arrays = {}, sampler_arrays
    table.storage.load_state(meta["storage"], storage_arrays)
    table.sampler.load_state_arrays(sampler_arrays)
    if table.remover is not None:
        table.remover.load_state_arrays(remover_arrays)
    elif remover_arrays:
        raise ValueError("remover: state arrays saved for a table without a remover")
    table._rng.bit_generator.state = meta["rng"]
    tokens = arrays.get("insert_tokens", np.zeros(0, dtype=np.int64))  # absent before tokens
    if tokens.ndim != 1 or (tokens.size and (tokens.dtype.kind not in "iu" or tokens.min() < 0)):
        raise ValueError("insert_tokens: must be a 1-D array of non-negative integers")
    table._tokens = {int(t) for t in tokens}
    counters = {k: int(v) for k, v in meta["counters"].items()}
    table._version = counters.pop("version")
    table.counters = TableCounters(**counters)
    if not set(meta["evictions"]) <= set(REASONS):
        raise ValueError(
            f"evictions: unknown reasons {sorted(set(meta['evictions']) - set(REASONS))}"
        )
    table._evictions.update({k: int(v) for k, v in meta["evictions"].items()})


def table_stats(table: TableParts) -> TableStats:
    st = table.storage
    live = st.live_slots()
    counters = table.counters
    ages = table._version - st.policy_version[live]
    return TableStats(
        name=table.name,
        size=st.size,
        max_rollouts=table.max_rollouts,
        num_tokens=st.num_tokens,
        max_tokens=table.eviction.max_tokens,
        max_bytes=table.eviction.max_bytes,
        nbytes=st.nbytes,
        payload_nbytes=st.payload_nbytes,
        stored_nbytes=st.stored_nbytes(),
        policy_version=table._version,
        inserts=counters.inserts,
        insert_calls=counters.insert_calls,
        samples=counters.samples,
        sample_calls=counters.sample_calls,
        evictions=dict(table._evictions),
        age_histogram=histogram(ages),
        reuse_histogram=histogram(st.times_sampled[live]),
        sampled_age_mean=counters.sampled_age_sum / max(1, counters.samples),
        sampled_age_max=counters.sampled_age_max,
        tasks=task_stats(st.task_names, st.task_code[live], ages, st.correct[live]),
    )
