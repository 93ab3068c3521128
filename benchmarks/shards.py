"""Sharded-table benchmark: table throughput under Ray with 1, 2 and 4 shards, against the
unsharded table actor, in the same run on the same Ray.

No model: the driver plays the generation workers (threads delivering pre-built batches of 256
rollouts of 256 + 256 tokens through the object store, as workers' results travel) and one
thread plays the learner (drawing batches of 256 through the same client the learner actor uses,
advancing the policy version after each). The table is the `uniform` preset's (y = 2, the
ratio limiter on), so deliveries and draws are coupled exactly as in a run. Reported per setup:
rollouts inserted and drawn per second over a fixed count of draws (count-based: `--draws`
batches), and the ratio to the unsharded actor.

What it says: the cost of the front (admission, split, the extra hop) and whether K actors on
this machine add or lose throughput. What it does not say: on one 2-core machine every shard
competes for the same cores and memory bandwidth, so it cannot show the scaling a cluster would
get from shards on separate nodes with their own cores, memory and network links; that needs a
multi-node run.

    python benchmarks/shards.py --json docs/bench_shards.json     # ~2 minutes
    python benchmarks/shards.py --draws 20 --shards 1 2           # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.config import load_config
from llm_replay.config.files import PRESETS_DIR
from llm_replay.data.batch import RolloutBatch
from llm_replay.runtime.ray_actors import RemoteTable, TableActor
from llm_replay.runtime.shards import ShardedClient, ShardFront, shard_config
from synthetic import fixed_batch

ROOT = Path(__file__).resolve().parents[1]
PRESET = PRESETS_DIR / "uniform.yaml"
BATCH = 256
TOKENS = 256


def make_batch(rng: np.random.Generator) -> RolloutBatch:
    return fixed_batch(rng, BATCH, TOKENS, TOKENS)


def build(shards: int, durable: bool, run_dir: Path) -> tuple[Any, Any, list[Any]]:
    """(table handle for deliveries, learner-side client, actors to kill) for `shards` table
    actors behind a front (0: the unsharded table actor), durable (fsync never) or in memory."""
    import ray

    sets = [
        "runtime=ray",
        "generation.prompts_per_step=32",
        "generation.group_size=8",
        "train.batch_size=256",
        "replay.capacity=8192",
        f"workers.table_shards={max(shards, 1)}",
        f"log.run_dir={run_dir}",
    ]
    config = load_config(PRESET, sets)
    remote: Any = ray.remote(TableActor)
    if not shards:
        actor = remote.options(max_concurrency=64, num_cpus=0).remote(config.to_dict())
        return actor, RemoteTable(actor), [actor]
    parts = [
        remote.options(max_concurrency=64, num_cpus=0).remote(
            shard_config(config, k), str(run_dir / f"shard-{k}") if durable else None, True
        )
        for k in range(shards)
    ]
    front_remote: Any = ray.remote(ShardFront)
    front = front_remote.options(max_concurrency=64, num_cpus=0).remote(config.to_dict(), parts)
    return front, ShardedClient(front, shards), [front, *parts]


def measure(
    shards: int, durable: bool, draws: int, producers: int, run_dir: Path
) -> dict[str, float]:
    import ray

    table, client, actors = build(shards, durable, run_dir)
    rng = np.random.default_rng(0)
    refs = [ray.put(make_batch(rng)) for _ in range(8)]
    stop = threading.Event()
    delivered = [0]
    lock = threading.Lock()
    next_item = [0]

    def produce() -> None:
        while not stop.is_set():
            with lock:
                item = next_item[0]
                next_item[0] += 1
            ref = refs[item % len(refs)]
            payload = [ref] if shards else ref
            try:
                out = ray.get(table.deliver.remote(payload, item))
            except Exception:  # the table closed under a blocked delivery
                return
            with lock:
                delivered[0] += int(out["rollouts"])

    threads = [threading.Thread(target=produce, daemon=True) for _ in range(producers)]
    for thread in threads:
        thread.start()
    client.sample(BATCH)  # warm: the first draw waits for min_size
    client.set_policy_version(1)
    start_delivered = delivered[0]
    start = time.perf_counter()
    for version in range(2, draws + 2):
        client.sample(BATCH)
        client.set_policy_version(version)
    seconds = time.perf_counter() - start
    inserted = delivered[0] - start_delivered
    stop.set()
    ray.get(table.close.remote())
    for thread in threads:
        thread.join(timeout=10)
    for actor in actors:
        ray.kill(actor, no_restart=True)
    return {
        "shards": float(shards),
        "seconds": seconds,
        "draws": float(draws),
        "samples_per_s": draws * BATCH / seconds,
        "inserts_per_s": inserted / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200, help="learner draws per setup")
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--producers", type=int, default=4, help="delivering threads")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (median)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp = ROOT / "tmp" / "ray"
    temp.mkdir(parents=True, exist_ok=True)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(temp),
        log_to_driver=False,
        configure_logging=False,
    )
    setups = [(0, False), *[(k, False) for k in args.shards], (2, True)]
    runs: dict[tuple[int, bool], list[dict[str, float]]] = {setup: [] for setup in setups}
    try:
        with tempfile.TemporaryDirectory(dir=ROOT / "tmp") as scratch:
            for repeat in range(args.repeats):
                for k, durable in setups:
                    run_dir = Path(scratch) / f"r{repeat}-k{k}-{durable}"
                    runs[k, durable].append(
                        measure(k, durable, args.draws, args.producers, run_dir)
                    )
    finally:
        ray.shutdown()
    base = float(np.median([r["samples_per_s"] for r in runs[0, False]]))
    results = []
    print(f"{'setup':<28}{'samples/s':>12}{'inserts/s':>12}{'vs unsharded':>14}")
    for k, durable in setups:
        samples = float(np.median([r["samples_per_s"] for r in runs[k, durable]]))
        inserts = float(np.median([r["inserts_per_s"] for r in runs[k, durable]]))
        name = "unsharded actor" if k == 0 else f"{k} shard{'s' * (k > 1)} + front"
        if durable:
            name += " (durable)"
        results.append(
            {
                "setup": name,
                "shards": k,
                "durable": durable,
                "samples_per_s": samples,
                "inserts_per_s": inserts,
                "ratio_to_unsharded": samples / base,
                "runs": runs[k, durable],
            }
        )
        print(f"{name:<28}{samples:>12.0f}{inserts:>12.0f}{samples / base:>13.2f}x")
    if args.json is not None:
        out = {
            "benchmark": "shards",
            "batch": BATCH,
            "tokens_per_rollout": 2 * TOKENS,
            "draws": args.draws,
            "producers": args.producers,
            "repeats": args.repeats,
            "cpus": os.cpu_count(),
            "results": results,
            "command": "python " + " ".join(["benchmarks/shards.py", *sys.argv[1:]]),
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
