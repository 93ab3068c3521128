"""Held-out accuracy by phase of a run, from an archive: the mean of each run's evaluations in the
first `--split` share of them (after the base evaluation) and in the rest, then the mean over
seeds with its standard error. It reads where a method sits while replay is at full strength and
after the anneal (docs/RESULTS.md, count_bits' early dip).

    python scripts/phase_means.py docs/experiment_suite/runs/count_bits on_policy ar3po auto_kl_cov_ar3po
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np


def evaluations(run: Path) -> list[float]:
    with gzip.open(run / "metrics.jsonl.gz", "rt") as lines:
        records = [json.loads(line) for line in lines]
    return [100 * r["eval/accuracy"] for r in records if r.get("kind") == "eval"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_dir", type=Path, help="an archive's task folder (METHOD/seed-N/)")
    parser.add_argument("methods", nargs="+")
    parser.add_argument("--split", type=float, default=0.25, help="share of the evaluations")
    args = parser.parse_args()
    for method in args.methods:
        early, late = [], []
        for run in sorted((args.task_dir / method).glob("seed-*")):
            accuracy = evaluations(run)[1:]  # the base model's evaluation is no phase's
            cut = max(1, round(args.split * len(accuracy)))
            early.append(np.mean(accuracy[:cut]))
            late.append(np.mean(accuracy[cut:]))
        if not early:
            raise SystemExit(f"{args.task_dir / method}: no archived runs")
        se = [
            np.std(x, ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
            for x in (early, late)
        ]
        print(
            f"{method}: first {args.split:.0%} {np.mean(early):.1f}% (SE {se[0]:.1f}), "
            f"rest {np.mean(late):.1f}% (SE {se[1]:.1f}), {len(early)} seeds"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
