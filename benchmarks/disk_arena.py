"""Disk-backed arena benchmark: a table larger than its resident memory, filled and sampled.

Fills a table whose arena is memory-mapped from `--dir` (`ReplayTable(arena_dir=...)`) with
`--tokens` tokens (rollouts of 64 prompt + 960 completion tokens, inserted 256 at a time), samples
batches of 256 throughout, and reports, in the same run:

- resident memory growth of the process (RSS from /proc/self/statm, file-backed pages included)
  while filling and sampling, against the arena's size on disk;
- sample latency p50/p99 for batches of 256, warm (pages in the page cache) and cold (after the
  file was written back and dropped from the page cache with posix_fadvise(DONTNEED));
- the same fill and warm sampling with the arena in RAM, for the ratio.

    python benchmarks/disk_arena.py --json docs/bench_disk_arena.json    # 1e8 tokens, ~2 min
    python benchmarks/disk_arena.py --tokens 2e6                          # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from llm_replay.buffer import ReplayTable
from llm_replay.data.batch import RolloutBatch
from synthetic import fixed_batch, warm_kernels

BATCH = 256
PROMPT = 64
COMPLETION = 960


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def batch(rng: np.random.Generator, first_group: int) -> RolloutBatch:
    return fixed_batch(rng, BATCH, PROMPT, COMPLETION, first_group)


def latencies(table: ReplayTable, calls: int) -> np.ndarray:
    out = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        table.sample(BATCH)
        out[i] = (time.perf_counter_ns() - t0) / 1e3
    return out


def run(tokens: float, arena_dir: Path | None, calls: int) -> dict[str, float]:
    inserts = max(2, int(tokens / (BATCH * (PROMPT + COMPLETION))))
    table = ReplayTable(inserts * BATCH, arena_dir=arena_dir, seed=0)
    rng = np.random.default_rng(0)
    template = [batch(rng, 0) for _ in range(4)]  # the inputs exist before the baseline
    warmup = ReplayTable(BATCH)  # code, not storage: load the compiled gather before it too
    warmup.insert(template[0])
    warmup.sample(BATCH)
    del warmup
    base = rss()
    peak = 0
    start = time.perf_counter()
    for i in range(inserts):
        table.insert(template[i % 4])
        if i % 8 == 7:
            table.sample(BATCH)
        peak = max(peak, rss() - base)
    fill_seconds = time.perf_counter() - start
    warm = latencies(table, calls)
    peak = max(peak, rss() - base)
    result = {
        "rollouts": float(table.size),
        "tokens": float(table.num_tokens),
        "payload_gib": table.storage.payload_nbytes / 2**30,
        "fill_seconds": fill_seconds,
        "rss_growth_mib": peak / 2**20,
        "warm_p50_us": float(np.percentile(warm, 50)),
        "warm_p99_us": float(np.percentile(warm, 99)),
    }
    store = table.storage.arena_store
    if store.disk:
        arena = table.storage.arena
        arena.flush()  # type: ignore[attr-defined]
        fd = os.open(arena.filename, os.O_RDONLY)  # type: ignore[attr-defined]
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        store.release()  # type: ignore[attr-defined]
        cold = latencies(table, min(calls, 50))
        result.update(
            cold_p50_us=float(np.percentile(cold, 50)),
            cold_p99_us=float(np.percentile(cold, 99)),
            arena_file_gib=os.path.getsize(arena.filename) / 2**30,  # type: ignore[attr-defined]
            rss_growth_mib=max(peak, rss() - base) / 2**20,
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=1e8)
    parser.add_argument("--calls", type=int, default=300, help="sample calls timed")
    parser.add_argument("--dir", type=Path, help="where the arena files go (default: a temp dir)")
    parser.add_argument("--memory", action="store_true", help="also run with the arena in RAM")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warm_kernels()  # JIT loading is not the table's cost
    root = Path(tempfile.mkdtemp(prefix="bench-arena-", dir=args.dir))
    try:
        results = {"disk": run(args.tokens, root / "arena", args.calls)}
        if args.memory:
            results["memory"] = run(args.tokens, None, args.calls)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    d = results["disk"]
    print(
        f"disk arena: {d['tokens']:.3g} tokens ({d['payload_gib']:.2f} GiB payload, file "
        f"{d['arena_file_gib']:.2f} GiB); resident growth {d['rss_growth_mib']:.0f} MiB; sample of "
        f"{BATCH}: warm p50 {d['warm_p50_us']:.0f} µs (p99 {d['warm_p99_us']:.0f}), cold p50 "
        f"{d['cold_p50_us']:.0f} µs (p99 {d['cold_p99_us']:.0f}); fill {d['fill_seconds']:.1f} s"
    )
    if "memory" in results:
        m = results["memory"]
        print(
            f"RAM arena: resident growth {m['rss_growth_mib']:.0f} MiB; warm p50 "
            f"{m['warm_p50_us']:.0f} µs; disk/RAM warm p50 {d['warm_p50_us'] / m['warm_p50_us']:.2f}×"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
