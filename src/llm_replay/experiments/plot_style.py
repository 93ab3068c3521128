"""The look every experiment plot shares: matplotlib without a display, a style per method (the
baseline black), a median line with its seed band, the compute axes' labels, and saving; used by
`report.py`, `suite.py`, `noise_floor.py` and `envelope_plot.py`, so none of them imports another
to draw."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import RunCurves, on_grid


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def styles(
    names: Sequence[str], baseline: str, extends: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Baseline in thick black; others distinct. A `_tis` variant is dashed in its parent's
    colour, and so is a continuation (`extends`), drawn under its base so that the shared first
    part shows as the base's solid line and only the continued part as dashes."""
    plt = pyplot()
    palette = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)
    continued = {c: b for c, b in (extends or {}).items() if c in names and b in names}
    styles: dict[str, dict[str, Any]] = {baseline: {"color": "black", "linewidth": 2.4}}
    # past the palette's 18 colours they come round again, dash-dotted
    free = (
        {"color": c} if ls == "-" else {"color": c, "linestyle": ls}
        for ls in ("-", "-.", ":")
        for c in palette
    )
    for name in names:
        if name in styles or name.endswith("_tis") or name in continued:
            continue
        if continued.get(baseline) == name:
            styles[name] = {"color": "black", "linewidth": 1.6}
        else:
            styles[name] = {**next(free), "linewidth": 1.6}
    for name in names:
        if name.endswith("_tis") and name not in styles:
            parent = styles.get(name[: -len("_tis")], next(free))
            styles[name] = {"color": parent["color"], "linewidth": 1.6, "linestyle": "--"}
    for name, base in continued.items():
        style = styles.get(name, {"color": styles[base]["color"], "linewidth": 1.6})
        styles[name] = {**style, "linestyle": "--", "zorder": 1.9}
    return styles


def band(
    ax: Any,
    runs: dict[str, list[RunCurves]],
    key: str,
    basis: str,
    scale: float = 1.0,
    styles: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Median over seeds with a min–max band, one line per method, drawn only where more than
    half its seeds have reached (runs end at slightly different compute, and a median of the
    one or two longest runs would read as the method's curve)."""
    end = max(
        float((r.steps if basis == "steps" else r.compute(basis))[-1])
        for c in runs.values()
        for r in c
    )
    grid = np.linspace(0.0, end, 80)
    for name, curves in runs.items():
        values = on_grid(curves, key, basis, grid) * scale
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            median = np.nanmedian(values, axis=0)
            low, high = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
        few = 2 * np.sum(~np.isnan(values), axis=0) <= len(curves)
        median[few], low[few], high[few] = np.nan, np.nan, np.nan
        style = (styles or {}).get(name, {"linewidth": 1.6})
        (line,) = ax.plot(grid, median, label=name, **style)
        if len(curves) > 1:
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.08, linewidth=0)
    ax.grid(alpha=0.3)


def save(fig: Any, path: Path, paths: list[Path]) -> None:
    fig.tight_layout()
    fig.savefig(path)
    pyplot().close(fig)
    paths.append(path)


BASIS_LABEL = {
    "measured": "compute (s): generation + scoring + training, measured here",
    "rollouts": "rollouts generated",
    "annotations": "preference pairs annotated",
    "steps": "gradient steps",
}


def basis_label(basis: str) -> str:
    if basis.startswith("mu_"):
        return f"compute on the μ = {basis[3:]} cost basis (training-token units)"
    return BASIS_LABEL[basis]


def finished_runs(experiment: Any) -> dict[str, list[RunCurves]]:
    """Every planned run of `experiment` that has finished (its summary written), by method."""
    from llm_replay.runtime.layout import SUMMARY_FILE

    runs: dict[str, list[RunCurves]] = {}
    for method, seed in experiment.planned():
        run_dir = experiment.run_dir(method.name, seed)
        if (run_dir / SUMMARY_FILE).is_file():
            runs.setdefault(method.name, []).append(RunCurves.load(run_dir))
    return runs


def task_grid(count: int, width: float, height: float) -> tuple[Any, Any, Any]:
    """matplotlib, a figure and its axes for `count` task panels, three to a row."""
    plt = pyplot()
    columns = min(3, count)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    return plt, fig, axes


def finish_task_grid(
    plt: Any,
    fig: Any,
    axes: Any,
    count: int,
    legend: Mapping[str, Any],
    title: str,
    path: Path,
    *,
    right: float,
) -> list[Path]:
    """Blank the unused panels, title the figure, one legend on the right, save and close."""
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, right, 1))
    fig.legend(list(legend.values()), list(legend), loc="center right", fontsize=8)
    fig.savefig(path)
    plt.close(fig)
    return [path]
