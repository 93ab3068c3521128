"""The suite's signal traces: the fresh rounds' entropy, the reused rows' covariance
Cov(log π, A) and, for runs with AR3PO's adaptive rollouts, the completions generated per prompt,
per task, against the share of the budget spent, median over seeds.

    python scripts/plot_suite_traces.py [--runs runs/experiment_suite] [--out PNG]
        [--methods on_policy,auto,auto_kl_cov]

Reads the run logs `llm-replay report configs/experiment_suite.yaml` restored from the archive
(`RUNS/TASK/full/METHOD/seed-N/metrics.jsonl`). Only runs made after the covariance fix log the
reused rows' covariance (the auto_kl_cov runs; RESULTS says why); the others' entropy is drawn
all the same. Rounds with no reused row (on-policy, or `auto` annealed to it) leave gaps.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from llm_replay.metrics import read_log

TRACES = (("generation/entropy", "fresh entropy (nats/token)"),
          ("signals/cov_replayed", "Cov(log π, A), reused rows"),
          ("adaptive/rollouts_per_prompt", "completions per prompt"))  # fmt: skip
GRID = np.linspace(0.0, 1.0, 41)


def trace(run: Path, key: str) -> np.ndarray | None:
    points = [
        (r["signals/progress"], r[key])
        for r in read_log(run)
        if r.get("kind") == "train" and key in r and "signals/progress" in r
    ]
    if len(points) < 2:
        return None
    x, y = np.array(points).T
    bins = np.clip(np.digitize(x, GRID) - 1, 0, len(GRID) - 1)
    out = np.full(len(GRID), np.nan)
    for b in np.unique(bins):  # the mean of each bin's rounds; a bin with none stays empty
        out[b] = y[bins == b].mean()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/experiment_suite"))
    parser.add_argument("--out", type=Path, default=Path("docs/experiment_suite/suite_traces.png"))
    parser.add_argument("--methods", default="on_policy,auto,auto_kl_cov")
    args = parser.parse_args()
    tasks = sorted(p.name for p in args.runs.iterdir() if (p / "full").is_dir())
    methods = args.methods.split(",")
    traces = [
        (key, label)
        for key, label in TRACES
        if any(
            trace(run, key) is not None
            for task in tasks
            for method in methods
            for run in (args.runs / task / "full" / method).glob("seed-*")
        )
    ]
    fig, axes = plt.subplots(
        len(traces), len(tasks), figsize=(3.2 * len(tasks), 2.8 * len(traces)), squeeze=False
    )
    for column, task in enumerate(tasks):
        for row, (key, label) in enumerate(traces):
            ax = axes[row][column]
            for colour, method in enumerate(methods):
                runs = sorted((args.runs / task / "full" / method).glob("seed-*"))
                curves = [c for c in (trace(r, key) for r in runs) if c is not None]
                if curves:
                    median = np.nanmedian(np.vstack(curves), axis=0)
                    ax.plot(GRID, median, color=f"C{colour}", label=f"{method} ({len(curves)})")
            ax.set_title(task if row == 0 else "", fontsize=9)
            ax.set_xlabel("share of the μ = 5 budget" if row == len(traces) - 1 else "")
            if column == 0:
                ax.set_ylabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
            if row == 0 and column == 0:
                ax.legend(fontsize=7)
    fig.suptitle("The suite's signal traces, median over seeds (seeds drawn in the legend)")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(args.out.resolve())


if __name__ == "__main__":
    main()
