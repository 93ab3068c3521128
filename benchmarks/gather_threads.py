"""The threaded gather against the serial one, same table, same process, interleaved.

Fills one table with benchmarks/buffer.py's `short` workload (1M rollouts, GRPO groups of 8) and
times `table.sample(256)` (uniform, with replacement) in alternating blocks of calls with the
gather on 1 thread and on every CPU this process may use, so drift of a shared machine hits both
alike. Prints the median latency of each block, the median of medians and their ratio; also the
two parts of a sample (the padded gather of the drawn rows alone, and the rest). `--json PATH`
writes them. Needs idle cores to mean anything: on a busy machine it measures the contention.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from buffer import BATCH, LlmReplay, Workload
from synthetic import warm_kernels


def median_us(fn, calls: int) -> float:  # type: ignore[no-untyped-def]
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter_ns()
        fn()
        times[i] = time.perf_counter_ns() - start
    return float(np.median(times) / 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=1_000_000)
    parser.add_argument("--blocks", type=int, default=6, help="blocks per setting")
    parser.add_argument("--calls", type=int, default=1000, help="samples per block")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import numba

    from llm_replay.buffer.kernels import set_gather_threads

    threads = min(len(os.sched_getaffinity(0)), numba.config.NUMBA_NUM_THREADS)
    if threads < 2:
        raise SystemExit("one CPU available: nothing to compare")
    warm_kernels()
    set_gather_threads(threads)  # compile the threaded kernel before timing
    set_gather_threads(1)
    workload = Workload.make(args.rollouts, (16, 256))
    impl = LlmReplay(args.rollouts, prioritized=False)
    for lo in range(0, args.rollouts, 256):
        impl.insert(workload, lo, min(args.rollouts, lo + 256))
    table = impl.table
    rng = np.random.default_rng(0)
    result: dict[str, object] = {"rollouts": args.rollouts, "batch": BATCH, "threads": threads}
    for n in (1, threads):
        set_gather_threads(n)
        for _ in range(50):
            impl.sample()
    for n in (1, threads):
        set_gather_threads(n)
        result[f"gather_only_us_{n}"] = median_us(
            lambda: table.storage.rows(rng.integers(0, args.rollouts, BATCH)).gather(0), args.calls
        )
    blocks: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(args.blocks):
        for n in (1, threads):
            set_gather_threads(n)
            blocks[n].append(median_us(impl.sample, args.calls))
    set_gather_threads(1)
    for n, values in blocks.items():
        result[f"sample_p50_us_blocks_{n}"] = values
        result[f"sample_p50_us_{n}"] = float(np.median(values))
    result["sample_speedup"] = result["sample_p50_us_1"] / result[f"sample_p50_us_{threads}"]  # type: ignore[operator]
    result["gather_speedup"] = (
        result["gather_only_us_1"] / result[f"gather_only_us_{threads}"]  # type: ignore[operator]
    )
    for key, value in result.items():
        shown = [round(v) for v in value] if isinstance(value, list) else value
        print(f"{key:28} {shown}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
