"""Durable-table benchmark: what logging every insert costs, and how long recovery takes.

Workload: batches of 256 rollouts of 512 prompt + 512 completion tokens (1.5 MiB of payload per
insert, the shape of one generation step of a mid-sized reasoning model). Same run, same machine:

1. insert throughput of an in-memory table against durable tables with `fsync` never, every 16
   inserts and always (`ReplayTable.open`), median of interleaved repeats; ratio to in-memory;
2. a durable table whose log holds `--recover-gib` GiB (no compaction), closed, then reopened:
   `ReplayTable.read` (replay only) and `ReplayTable.open` (replay, then a compacting snapshot)
   timed, with the log size and the machine's sequential read bandwidth on the same file measured
   beside them, so the replay can be read as a fraction of the disk's speed.

    python benchmarks/durable.py --json docs/bench_durable.json            # ~2 minutes, 1 GiB
    python benchmarks/durable.py --inserts 20 --recover-gib 0.05           # smoke test
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.durable import LOG
from llm_replay.data.batch import RolloutBatch
from synthetic import fixed_batch, warm_kernels

BATCH = 256
PROMPT = 512
COMPLETION = 512


def make_batch(rng: np.random.Generator, first_group: int) -> RolloutBatch:
    return fixed_batch(rng, BATCH, PROMPT, COMPLETION, first_group)


def insert_rate(make: object, batches: list[RolloutBatch]) -> float:
    table = make()  # type: ignore[operator]
    start = time.perf_counter()
    for batch in batches:
        table.insert(batch)
    seconds = time.perf_counter() - start
    table.close()
    return len(batches) * BATCH / seconds


def read_bandwidth(path: Path) -> float:
    """MiB/s reading `path` once (the page cache may hold it, as it would for the replay)."""
    start = time.perf_counter()
    with path.open("rb") as handle:
        while handle.read(1 << 24):
            pass
    return path.stat().st_size / (1 << 20) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inserts", type=int, default=60, help="batches per throughput run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (median)")
    parser.add_argument("--recover-gib", type=float, default=1.0, help="log size to recover")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--dir", type=Path, help="where to write tables (default: a temp dir)")
    args = parser.parse_args()
    warm_kernels()  # JIT loading is not the table's cost
    root = Path(tempfile.mkdtemp(prefix="bench-durable-", dir=args.dir))
    rng = np.random.default_rng(0)
    batches = [make_batch(rng, 100 * i) for i in range(min(args.inserts, 40))]
    batches = [batches[i % len(batches)] for i in range(args.inserts)]
    capacity = BATCH * (args.inserts + 1)
    payload_mib = batches[0].num_tokens * 4 / (1 << 20) + BATCH * COMPLETION * 4 / (1 << 20)
    results: dict[str, object] = {"insert_payload_mib": payload_mib, "inserts": args.inserts}
    try:
        samples: dict[str, list[float]] = {}
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits all alike
            samples.setdefault("memory", []).append(
                insert_rate(lambda: ReplayTable(capacity), batches)
            )
            for policy in ("never", "every", "always"):
                directory = root / f"t-{policy}"
                samples.setdefault(f"durable_{policy}", []).append(
                    insert_rate(
                        lambda d=directory, p=policy: ReplayTable.open(
                            d, max_rollouts=capacity, fsync=p, fsync_every=16, compact_bytes=1 << 40
                        ),
                        batches,
                    )
                )
                shutil.rmtree(directory)
        rates = {k: float(np.median(v)) for k, v in samples.items()}
        results["insert_rollouts_per_s"] = rates
        results["insert_ratio_to_memory"] = {k: v / rates["memory"] for k, v in rates.items()}

        n_recover = max(1, int(args.recover_gib * (1 << 30) / (payload_mib * (1 << 20))))
        directory = root / "recover"
        table = ReplayTable.open(
            directory, max_rollouts=BATCH * (n_recover + 1), fsync="never", compact_bytes=1 << 40
        )
        for i in range(n_recover):
            table.insert(batches[i % len(batches)])
            if i % 4 == 3:
                table.sample(BATCH)
        table.close()
        log_bytes = sum(p.stat().st_size for p in (directory / LOG).glob("*.seg"))
        (segment,) = (directory / LOG).glob("*.seg")
        bandwidth = read_bandwidth(segment)
        start = time.perf_counter()
        read = ReplayTable.read(directory)
        read_seconds = time.perf_counter() - start
        size = read.size
        del read
        start = time.perf_counter()
        ReplayTable.open(directory, max_rollouts=BATCH * (n_recover + 1)).close()
        open_seconds = time.perf_counter() - start
        results["recovery"] = {
            "log_gib": log_bytes / (1 << 30),
            "rollouts": size,
            "read_seconds": read_seconds,
            "open_seconds_with_compaction": open_seconds,
            "replay_mib_per_s": log_bytes / (1 << 20) / read_seconds,
            "sequential_read_mib_per_s": bandwidth,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"insert of {BATCH} rollouts × {PROMPT}+{COMPLETION} tokens ({payload_mib:.2f} MiB):")
    for name, rate in results["insert_rollouts_per_s"].items():  # type: ignore[union-attr]
        ratio = results["insert_ratio_to_memory"][name]  # type: ignore[index]
        print(f"  {name:16s} {rate:10.0f} rollouts/s   {ratio:5.2f}× in-memory")
    r = results["recovery"]
    print(
        f"recovery of a {r['log_gib']:.2f} GiB log ({r['rollouts']} rollouts): read "  # type: ignore[index]
        f"{r['read_seconds']:.1f} s ({r['replay_mib_per_s']:.0f} MiB/s; the file reads at "  # type: ignore[index]
        f"{r['sequential_read_mib_per_s']:.0f} MiB/s), open with compaction "  # type: ignore[index]
        f"{r['open_seconds_with_compaction']:.1f} s"  # type: ignore[index]
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
