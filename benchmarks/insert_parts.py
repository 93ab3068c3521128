"""Where an insert's time goes: the prompt-sharing check (numba and numpy) and the arena write into
pages already touched and into fresh ones, for one batch of 256 `short` rollouts from
benchmarks/buffer.py's workload. Prints microseconds per call; `--json PATH` writes them."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from buffer import Workload
from synthetic import warm_kernels

CALLS = 1000


def per_call_us(fn, calls: int = CALLS) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warm_kernels()
    from llm_replay.buffer import layout
    from llm_replay.buffer.gather import scatter_rows
    from llm_replay.buffer.kernels import set_gather_backend
    from llm_replay.data.batch import RolloutBatch

    w = Workload.make(256, (16, 256))
    batch = RolloutBatch.from_ragged(
        prompt_ids=w.prompts,
        completion_ids=w.completions,
        behaviour_logprobs=w.logprobs,
        rewards=w.rewards,
        group_ids=np.arange(256) // 8,
        policy_versions=0,
    )
    p = batch.prompt_lengths.astype(np.int64)
    c = batch.completion_lengths.astype(np.int64)
    out: dict[str, float] = {}
    for backend in ("numba", "numpy"):
        set_gather_backend(backend)
        out[f"share_check_{backend}_us"] = per_call_us(
            lambda _: layout.shares_previous_prompt(batch.group_ids, p, batch.prompt_ids)
        )
    set_gather_backend("auto")
    shares = layout.shares_previous_prompt(batch.group_ids, p, batch.prompt_ids)
    units = int(layout.stored_units(shares, p, c).sum())

    def write(arena: np.ndarray, slot: int) -> None:
        block = arena[slot * units : (slot + 1) * units]
        scatter_rows(
            block, shares, p, c, batch.prompt_ids, batch.completion_ids, batch.behaviour_logprobs
        )

    warm = np.ones(units * 16, dtype=np.int32)  # touched: its pages are resident
    out["arena_write_touched_us"] = per_call_us(lambda i: write(warm, i % 16))
    fresh = np.zeros(units * CALLS, dtype=np.int32)  # calloc: pages faulted in on first write
    out["arena_write_fresh_pages_us"] = per_call_us(lambda i: write(fresh, i))
    out["batch_bytes"] = 4.0 * units
    for key, value in out.items():
        print(f"{key:28} {value:10.1f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
