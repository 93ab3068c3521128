"""Plots and tables from run logs (`metrics.jsonl`), so results can be redrawn without re-running.

`accuracy_curves` reads the eval records of each run; `compute_to_reach` interpolates nothing: it
is the compute at the first evaluation whose accuracy reaches the target. `plot_accuracy_vs_compute`
draws one line per run against measured compute seconds (evaluation time excluded).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llm_replay.metrics.logging import read_log


def accuracy_curve(run_dir: Path) -> tuple[list[float], list[float], list[int]]:
    """(compute seconds, accuracy, gradient steps) at each evaluation of a run."""
    evals = [r for r in read_log(run_dir) if r.get("kind") == "eval"]
    return (
        [float(r["compute/seconds"]) for r in evals],
        [float(r["eval/accuracy"]) for r in evals],
        [int(r["steps"]) for r in evals],
    )


def compute_to_reach(run_dir: Path, target: float) -> float | None:
    """Compute seconds at the first evaluation with accuracy >= target (None if never)."""
    for seconds, accuracy, _ in zip(*accuracy_curve(run_dir), strict=True):
        if accuracy >= target:
            return seconds
    return None


def plot_accuracy_vs_compute(
    runs: Sequence[tuple[str, Path]], output: Path, *, title: str = "Held-out accuracy"
) -> Path:
    """Two panels, one line per (label, run_dir): accuracy vs measured compute and vs steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_compute, by_steps) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120, sharey=True)
    for label, run_dir in runs:
        seconds, accuracy, steps = accuracy_curve(run_dir)
        percent = [100 * a for a in accuracy]
        (line,) = by_compute.plot(seconds, percent, marker="o", markersize=3, label=label)
        by_steps.plot(steps, percent, marker="o", markersize=3, color=line.get_color(), label=label)
    if runs:
        base = 100 * accuracy_curve(runs[0][1])[1][0]
        for ax in (by_compute, by_steps):
            ax.axhline(base, color="grey", linestyle="--", linewidth=1, label="base model")
            ax.grid(alpha=0.3)
    by_compute.set_xlabel("compute (s): generation + scoring + training, measured")
    by_compute.set_ylabel("held-out greedy accuracy (%)")
    by_steps.set_xlabel("gradient steps")
    by_compute.legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output)
    plt.close(fig)
    return output
