"""The envelope plots (issue #53): accuracy against μ = 5 compute with each member of the baseline
sweep thin, their envelope thick, every other method over it, and the stretch of compute each
member leads shaded in its colour and named. `envelope_vs_compute.png` per experiment (and so per
task of a suite), `suite_envelope.png` one panel per task. The reading is `envelope.py`'s."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llm_replay.experiments.analysis import RunCurves
from llm_replay.experiments.envelope_axis import axis_grid, median_curve, on_top, segments_text

LABEL_SHARE = 0.08  # a lead shorter than this share of the axis is shaded but not named


def draw_envelope(
    ax: Any,
    runs: Mapping[str, Sequence[RunCurves]],
    reading: Mapping[str, Any],
    styles: Mapping[str, Mapping[str, Any]],
) -> None:
    """Onto `ax`: members thin, the envelope thick, the other methods over it (medians over
    seeds on the μ = 5 axis, in %), and who leads where."""
    members = {m: runs[m] for m in reading["members"] if m in runs}
    grid = axis_grid(runs)
    envelope, _ = on_top(members, grid)
    ax.plot(
        grid,
        100 * envelope,
        color="black",
        linewidth=5,
        alpha=0.25,
        zorder=1.5,
        label="tuned on-policy (envelope)",
    )
    for name, curves in members.items():
        colour = styles.get(name, {}).get("color")
        ax.plot(grid, 100 * median_curve(curves, grid), color=colour, linewidth=0.9, label=name)
    for name, curves in runs.items():
        if name not in members:
            style = {"linewidth": 1.6, **styles.get(name, {}), "zorder": 3}
            ax.plot(grid, 100 * median_curve(curves, grid), label=name, **style)
    segments = reading["axis"]["segments"]
    points = reading["axis"]["grid"]
    step = points[1] - points[0] if len(points) > 1 else 0.0
    for seg in segments:
        colour = styles.get(seg["member"], {}).get("color", "grey")
        low, high = seg["from"] - step / 2, seg["to"] + step / 2
        ax.axvspan(low, high, color=colour, alpha=0.07, linewidth=0)
        if high - low >= LABEL_SHARE * grid[-1]:
            ax.text(
                (low + high) / 2,
                0.98,
                seg["member"],
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=7,
                color=colour,
            )
    ax.grid(alpha=0.3)


def plot_envelope(
    name: str,
    runs: Mapping[str, Sequence[RunCurves]],
    reading: Mapping[str, Any],
    styles: Mapping[str, Mapping[str, Any]],
    path: Path,
) -> Path:
    """One experiment's envelope plot."""
    from llm_replay.experiments.plot_style import basis_label as _basis_label
    from llm_replay.experiments.plot_style import pyplot as _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.4), dpi=120)
    draw_envelope(ax, runs, reading, styles)
    ax.set_xlabel(_basis_label("mu_5"))
    ax.set_ylabel("held-out greedy accuracy (%, trailing mean of 3 evals)")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    left_out = reading["members_left_out"]
    gone = f"; left out: {', '.join(left_out)}" if left_out else ""
    title = (
        f"{name}: against tuned on-policy (thick: the best member at each compute; medians over "
        f"seeds{gone}). On top: {segments_text(reading)}"
    )
    ax.set_title(textwrap.fill(title, 120), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_suite_envelope(
    suite: Any, summaries: Mapping[str, Mapping[str, Any]], out: Path
) -> list[Path]:
    """One envelope panel per task that declares a sweep (`suite_envelope.png`); none without."""
    from llm_replay.experiments.plot_style import finish_task_grid, finished_runs, task_grid
    from llm_replay.experiments.plot_style import styles as _styles

    tasks = [t for t, s in summaries.items() if s.get("envelope")]
    if not tasks:
        return []
    plt, fig, axes = task_grid(len(tasks), 5.6, 4.2)
    first = suite.tasks[tasks[0]]
    styles = _styles([m.name for m in first.methods], first.baseline)
    legend: dict[str, Any] = {}
    for ax, task in zip(axes.flat, tasks, strict=False):
        paired = set(summaries[task]["envelope"]["seed_ids"])
        runs = {
            m: [c for c in cs if c.seed in paired]
            for m, cs in finished_runs(suite.tasks[task]).items()
        }
        draw_envelope(
            ax, {m: cs for m, cs in runs.items() if cs}, summaries[task]["envelope"], styles
        )
        for line in ax.get_lines():
            legend.setdefault(str(line.get_label()), line)
        on_top_text = f"on top: {segments_text(summaries[task]['envelope'])}"
        ax.set_title(f"{task}\n{textwrap.fill(on_top_text, 70)}", fontsize=7)
        ax.set_xlabel("compute, μ = 5 basis")
        ax.set_ylabel("held-out accuracy (%)")
    title = f"{suite.name}: every method over tuned on-policy (thick: the sweep's envelope)"
    path = out / "suite_envelope.png"
    return finish_task_grid(plt, fig, axes, len(tasks), legend, title, path, right=0.8)
