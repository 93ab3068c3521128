"""Restructuring without changing results: short runs under two source trees, logs compared
record for record.

    python scripts/log_identity.py run  --tree /path/to/checkout --out OUT [--only NAME,...]
    python scripts/log_identity.py diff OUT_BEFORE OUT_AFTER
    python scripts/log_identity.py diff COMPARE_OUT_BEFORE COMPARE_OUT_AFTER   # any two outputs

`run` trains each short run below with the tree's own `src/` (so one virtualenv serves both
trees), each in `OUT/NAME/`. `diff` compares every key the two `metrics.jsonl` files share,
except timings (seconds, wall time, measured μ, throughput, idle shares), and prints one line a
run: records, values compared, values that differ and the first record that differs (the runs
above, or every `metrics.jsonl` under OUT_BEFORE, such as two `llm-replay compare` outputs). A run whose
records differ in number is reported as such. Keys only one side has are listed, not compared
(a new signal key is expected; a lost one is not).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

CHAIN = ["train.iterations=6", "eval.size=50", "eval.every=3", "train.threads=1"]
RUNS: dict[str, tuple[str, list[str]]] = {
    "sync_on_policy": ("on_policy", CHAIN),
    "sync_positive": ("positive", CHAIN),
    "sync_auto": ("auto", CHAIN),
    "sync_exgrpo": ("exgrpo", CHAIN),
    "sync_zero_variance": ("on_policy", [*CHAIN, "replay.zero_variance.enabled=true"]),
    "threaded_uniform": (
        "async_uniform",
        [*CHAIN, "runtime=threaded", "workers.count=1"],
    ),
    "threaded_prioritized": (
        "prioritized",
        [*CHAIN, "runtime=threaded", "workers.count=1"],
    ),
    "ray_uniform": (
        "async_uniform",
        [*CHAIN, "runtime=ray", "workers.count=1", "workers.learner_cpus=1"],
    ),
    "trl_positive": ("positive", CHAIN),  # through `run_trl`, as `backend: trl` in compare
    "trl_auto": ("auto", CHAIN),  # adaptive rollouts' stages through TRL's generate-and-score
}
TRL = {"trl_positive", "trl_auto"}
TIMING_WORDS = {"seconds", "wall", "idle", "busy", "time", "throughput", "latency"}


def is_timing(key: str) -> bool:
    """Measured seconds or what is derived from them: a key naming a timing word (a whole word of
    the key, so `times_sampled` is a count), a rate per second, a share of time, or the measured μ (`compute/mu`,
    `replay/mu`; `compute/mu_5` is a count)."""
    words = set(re.split(r"[/_]", key))
    measured_mu = key.rsplit("/", 1)[-1] == "mu"
    time_share = "share_of" in key  # async/table_share_of_learner: a share of measured seconds
    return measured_mu or time_share or bool(words & TIMING_WORDS) or key.endswith("_per_s")


def run(tree: Path, out: Path, only: list[str] | None) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), RAY_AUTH_MODE="disabled")
    env.setdefault("OMP_NUM_THREADS", "1")
    for name, (preset, sets) in RUNS.items():
        if only and name not in only:
            continue
        run_dir = out / name
        if (run_dir / "summary.json").is_file():
            continue
        overrides = [*sets, f"log.run_dir={run_dir}"]
        if name in TRL:
            code = (
                "import sys; from llm_replay.config import load_config; "
                "from llm_replay.integrations.trl.runner import run_trl; "
                "run_trl(load_config(sys.argv[1], sys.argv[2:]), show_progress=False)"
            )
            args = [sys.executable, "-c", code, preset, *overrides]
        else:
            args = [sys.executable, "-m", "llm_replay.cli", "train", preset, "--quiet"]
            for item in overrides:
                args += ["--set", item]
        print(f"{name}: {' '.join(args[3:])}", flush=True)
        result = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            print(f"{name}: failed\n{result.stderr[-3000:]}", flush=True)


def records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def diff(before: Path, after: Path) -> int:
    worst = 0
    names = [n for n in RUNS if (before / n / "metrics.jsonl").is_file()] or sorted(
        str(p.parent.relative_to(before)) for p in before.rglob("metrics.jsonl")
    )
    for name in names:
        a, b = before / name, after / name
        if not (a / "metrics.jsonl").is_file() or not (b / "metrics.jsonl").is_file():
            print(
                f"{name}: missing on {'before' if not (a / 'metrics.jsonl').is_file() else 'after'}"
            )
            continue
        ra, rb = records(a), records(b)
        compared = differing = 0
        first: int | None = None
        only_a: set[str] = set()
        only_b: set[str] = set()
        for index, (x, y) in enumerate(zip(ra, rb, strict=False)):
            only_a |= set(x) - set(y)
            only_b |= set(y) - set(x)
            for key in set(x) & set(y):
                if is_timing(key):
                    continue
                compared += 1
                if not same(x[key], y[key]):
                    differing += 1
                    first = index if first is None else first
        count = f"{len(ra)}" if len(ra) == len(rb) else f"{len(ra)} vs {len(rb)} (differ)"
        where = "" if first is None else f", first at record {first}"
        print(
            f"{name}: records {count}, values compared {compared}, differing {differing}{where}; "
            f"keys only before {sorted(only_a) or 'none'}, only after {sorted(only_b) or 'none'}"
        )
        worst = max(worst, differing + (len(ra) != len(rb)))
    return 1 if worst else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tree", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", help="comma-separated run names")
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.tree.resolve(), args.out.resolve(), args.only.split(",") if args.only else None)
        return 0
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
