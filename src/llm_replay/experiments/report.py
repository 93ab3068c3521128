"""Plots and tables from run logs (`metrics.jsonl`), so results can be redrawn without re-running.

`accuracy_curve` reads the eval records of a run; `plot_accuracy_vs_compute` draws one line per
run against compute on the μ = 5 basis, against measured compute seconds (evaluation time
excluded) and against gradient steps. Compute-to-target ratios are
`analysis.compare_methods`'.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments import final_gap
from llm_replay.experiments.analysis import RunCurves, on_grid
from llm_replay.experiments.plot_style import band as _band
from llm_replay.experiments.plot_style import basis_label as _basis_label
from llm_replay.experiments.plot_style import pyplot as _pyplot
from llm_replay.experiments.plot_style import save as _save
from llm_replay.experiments.plot_style import styles as _styles
from llm_replay.methods.options.anneal import STALE_MIN
from llm_replay.metrics.compute import cost_on_basis
from llm_replay.metrics.logging import read_log


def accuracy_curve(run_dir: Path) -> tuple[list[float], list[float], list[int]]:
    """(compute seconds, accuracy, gradient steps) at each evaluation of a run."""
    evals = [r for r in read_log(run_dir) if r.get("kind") == "eval"]
    return (
        [float(r["compute/seconds"]) for r in evals],
        [float(r["eval/accuracy"]) for r in evals],
        [int(r["steps"]) for r in evals],
    )


def cost_curve(run_dir: Path, basis: str) -> list[float]:
    """The compute spent on `basis` (e.g. "mu_5") at each evaluation of a run."""
    return [cost_on_basis(basis, r) for r in read_log(run_dir) if r.get("kind") == "eval"]


def why_axes_differ(measured_mu: float | None) -> str:
    """The footnote under the accuracy plot: why the μ = 5 and the measured-seconds panels differ."""
    here = "" if measured_mu is None else f" (this machine's measured μ: {measured_mu:.2f})"
    return (
        "μ = 5: generating a token costs 5× training on it, as on GPUs serving real models. Where "
        f"generation is cheaper{here}, a method that trains more per rollout looks slower in seconds."
    )


def measured_mu(run_dir: Path) -> float | None:
    values = [r["compute/mu"] for r in read_log(run_dir) if r.get("compute/mu") is not None]
    return float(values[-1]) if values else None


def plot_accuracy_vs_compute(
    runs: Sequence[tuple[str, Path]], output: Path, *, title: str = "Held-out accuracy"
) -> Path:
    """Three panels, one line per (label, run_dir): accuracy against compute on the μ = 5 cost
    basis (what budgets and claims are made on), against measured seconds on this machine, and
    against gradient steps; a footnote says why the first two differ."""
    plt = _pyplot()
    fig, (by_cost, by_seconds, by_steps) = plt.subplots(
        1, 3, figsize=(15, 4.6), dpi=120, sharey=True
    )
    for label, run_dir in runs:
        seconds, accuracy, steps = accuracy_curve(run_dir)
        percent = [100 * a for a in accuracy]
        cost = cost_curve(run_dir, "mu_5")
        (line,) = by_cost.plot(cost, percent, marker="o", markersize=3, label=label)
        style = {"marker": "o", "markersize": 3, "color": line.get_color(), "label": label}
        by_seconds.plot(seconds, percent, **style)
        by_steps.plot(steps, percent, **style)
    if runs:
        base = 100 * accuracy_curve(runs[0][1])[1][0]
        for ax in (by_cost, by_seconds, by_steps):
            ax.axhline(base, color="grey", linestyle="--", linewidth=1, label="base model")
            ax.grid(alpha=0.3)
    by_cost.set_xlabel("compute, μ = 5 basis (tokens generated × 5 + tokens trained)")
    by_seconds.set_xlabel("compute (s) on this machine: generation + scoring + training")
    by_steps.set_xlabel("gradient steps")
    by_cost.set_ylabel("held-out greedy accuracy (%)")
    by_cost.legend(loc="lower right")
    fig.suptitle(title)
    note = why_axes_differ(measured_mu(runs[0][1]) if runs else None)
    fig.text(0.5, 0.01, note, ha="center", fontsize=8, color="dimgrey")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output)
    plt.close(fig)
    return output


def plot_experiment(
    experiment: Any,
    runs: dict[str, list[RunCurves]],
    summary: dict[str, Any],
    out: Path | None = None,
) -> list[Path]:
    """The comparison's PNGs in `out` (the experiment's): accuracy vs compute (measured and
    μ = 5), vs annotations (a preference experiment's rows that annotate, when `annotations` is
    one of its bases), vs steps, entropy, pass@k, ratio vs μ."""
    plt = _pyplot()
    out = Path(experiment.out if out is None else out)
    counts = sorted({len(c) for c in runs.values()})
    seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    band = f"median over {seeds} seeds, band = min–max" if counts[-1] > 1 else "one seed"
    paths: list[Path] = []
    extends = {m.name: m.extends for m in experiment.methods if m.extends is not None}
    styles = _styles(list(runs), summary["baseline"], extends)
    continued = (
        "\ndashed = a method continued to a larger budget" if set(extends) & set(runs) else ""
    )

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), dpi=120, sharey=True)
    for ax, basis in zip(axes, ("measured", "mu_5"), strict=True):
        _band(ax, runs, "accuracy", basis, 100.0, styles)
        ax.axhline(100 * summary["target_accuracy"], color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel(_basis_label(basis))
    axes[0].set_ylabel("held-out greedy accuracy (%, trailing mean of 3 evals)")
    axes[1].legend(fontsize=8, loc="lower right", ncol=2)
    fig.suptitle(
        f"{experiment.name}: accuracy vs compute ({band}; dotted = baseline's final){continued}"
    )
    _save(fig, out / "accuracy_vs_compute.png", paths)

    annotated = {
        name: curves
        for name, curves in runs.items()
        if any(float(r.compute("annotations")[-1]) > 0 for r in curves)
    }
    if "annotations" in experiment.bases and annotated:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        _band(ax, annotated, "accuracy", "annotations", 100.0, styles)
        ax.axhline(100 * summary["target_accuracy"], color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel(_basis_label("annotations"))
        ax.set_ylabel("held-out greedy accuracy (%)")
        ax.set_title(f"{experiment.name}: accuracy vs annotations\n({band})")
        ax.legend(fontsize=8, loc="lower right")
        _save(fig, out / "accuracy_vs_annotations.png", paths)

    for key, basis, ylabel, scale, file in (
        ("accuracy", "steps", "held-out greedy accuracy (%)", 100.0, "accuracy_vs_steps.png"),
        (
            "eval/entropy",
            "measured",
            "policy entropy (nats / token)",
            1.0,
            "entropy_vs_compute.png",
        ),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        _band(ax, runs, key, basis, scale, styles)
        ax.set_xlabel(_basis_label(basis))
        ax.set_ylabel(ylabel)
        ax.set_title(f"{experiment.name} ({band})")
        ax.legend(fontsize=8)
        _save(fig, out / file, paths)

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name, stats in summary["methods"].items():
        ks = sorted(int(k[5:]) for k in stats if k.startswith("pass@"))
        ax.plot(
            ks,
            [100 * stats[f"pass@{k}"]["median"] for k in ks],
            marker="o",
            label=name,
            **styles[name],
        )
    all_k = [int(k[5:]) for m in summary["methods"].values() for k in m if k.startswith("pass@")]
    ax.set_xlim(0.8, max(all_k, default=2) * 1.25)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k at the end (%, median over seeds)")
    ax.set_title(f"{experiment.name}: pass@k")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, out / "pass_at_k.png", paths)

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    mus = list(experiment.mu_curve)
    plotted = False
    for name, stats in summary["methods"].items():
        ratios = [stats["compute_to_target_ratio"].get(f"mu_{m:g}") for m in mus]
        plotted |= any(r is not None for r in ratios)
        ax.plot(
            mus,
            [np.nan if r is None else r for r in ratios],
            marker="o",
            label=name,
            **styles[name],
        )
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlim(min(mus) / 1.5, max(mus) * 1.5)
    ax.set_xscale("log")
    if not plotted:
        ax.text(0.5, 0.5, "no method reached the target", transform=ax.transAxes, ha="center")
    ax.set_xlabel("μ = generation cost / training cost (cost basis)")
    ax.set_ylabel("compute to reach baseline's final accuracy ÷ baseline's")
    ax.set_title(f"{experiment.name}: where replay pays (missing = never reached)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, out / "ratio_vs_mu.png", paths)
    paths.append(plot_replay_dynamics(experiment.name, runs, styles, out / "replay_dynamics.png"))
    paths.append(plot_delta(experiment.name, runs, summary["baseline"], styles, out))
    if summary.get("envelope"):  # a baseline sweep: against tuned on-policy (issue #53)
        from llm_replay.experiments.envelope_plot import plot_envelope

        envelope = out / "envelope_vs_compute.png"
        paths.append(plot_envelope(experiment.name, runs, summary["envelope"], styles, envelope))
        reading = summary["envelope"].get("final_gap")
        if reading:  # absent in a summary written before it
            members = set(summary["envelope"]["members"])
            drawn = final_gap.plot_gaps(
                {experiment.name: reading},
                [m for m in runs if m not in members],
                out / "final_gap.png",
                title=f"{experiment.name}: final accuracy against the best tuned on-policy "
                f"setting, per seed (bars: ±{final_gap.CREDIBLE:g} standard errors)",
                styles=styles,
            )
            if drawn is not None:
                paths.append(drawn)
    controller = plot_controller(experiment.name, runs, styles, out / "controller.png")
    if controller is not None:
        paths.append(controller)
    gap = plot_reward_gap(experiment.name, runs, styles, out / "reward_gap.png")
    if gap is not None:
        paths.append(gap)
    return paths


def plot_delta(
    name: str,
    runs: dict[str, list[RunCurves]],
    baseline: str,
    styles: dict[str, dict[str, Any]],
    out: Path,
    basis: str = "mu_5",
) -> Path:
    """Each method's accuracy minus the baseline's at equal compute, at every point the baseline
    covers (medians over seeds), with the baseline's own seed band around zero: a method whose
    line stays above the band's floor is never below the baseline beyond its seed interval."""
    plt = _pyplot()
    path = out / "delta_vs_compute.png"
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    reference = runs.get(baseline)
    if not reference:
        ax.text(0.5, 0.5, f"no runs of the baseline {baseline!r}", transform=ax.transAxes)
        _save(fig, path, [])
        return path
    end = min(float(r.compute(basis)[-1]) for r in reference)
    grid = np.linspace(end / 80, end, 80)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        base = on_grid(reference, "accuracy", basis, grid) * 100.0
        middle = np.nanmedian(base, axis=0)
        ax.fill_between(
            grid,
            np.nanmin(base, axis=0) - middle,
            np.nanmax(base, axis=0) - middle,
            color="grey",
            alpha=0.2,
            linewidth=0,
            label=f"{baseline}: seed band",
        )
        for method, curves in runs.items():
            if method == baseline:
                continue
            values = np.nanmedian(on_grid(curves, "accuracy", basis, grid) * 100.0, axis=0)
            ax.plot(grid, values - middle, label=method, **styles[method])
    ax.axhline(0.0, color="grey", linewidth=1)
    ax.set_xlabel(_basis_label(basis))
    ax.set_ylabel(f"Δ accuracy vs {baseline} at equal compute (points)")
    ax.set_title(f"{name}: Δ accuracy at equal compute (median over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    _save(fig, path, [])
    return path


DYNAMICS = (
    ("train/age_mean", "mean age of trained rollouts (learner steps)"),
    ("train/replayed_fraction", "share of trained rollouts drawn before"),
    ("replay/auto_ratio", "replay ratio y chosen by `compute_optimal`"),
    ("anneal/scale", "replay scale s of `replay.anneal` (1 = as configured, 0 = on-policy)"),
)
GUARD = ("guard/value", "the guard's pooled cos(replay's gradient, the fresh rows')")


Series = Callable[[dict[str, Any]], float | None]
Panel = tuple[Series, str, float | None]  # what to plot, its axis label, a threshold to dot


def _key(name: str) -> Series:
    return lambda r: None if r.get(name) is None else float(r[name])


def _stale_m2(r: dict[str, Any]) -> float | None:
    m2, stale = r.get("signals/log_ratio_m2"), r.get("signals/stale_fraction")
    if m2 is None or stale is None or float(stale) <= STALE_MIN:
        return None  # as the controller reads it: no stale rows to speak of
    return float(m2) / float(stale)


CONTROLLER: tuple[Panel, ...] = (
    (_key("anneal/entropy"), "fresh entropy, smoothed (nats / token)", None),
    (_key("anneal/reward_gain"), "fresh reward gain over the window", 0.01),
    (_stale_m2, "log-ratio 2nd moment on stale rows", 0.04),
    (_key("anneal/scale"), "replay scale s (1 = as configured, 0 = on-policy)", None),
)


def plot_replay_dynamics(
    name: str, runs: dict[str, list[RunCurves]], styles: dict[str, dict[str, Any]], path: Path
) -> Path:
    """Per method over the run: how old the trained rollouts were, how many were reused, the y
    that `auto` chose, the replay controller's scale and, where a run logs it, the guard's pooled
    cosine (median over seeds of each iteration's value; rolling mean of 10)."""
    panels: list[Panel] = [(_key(key), label, None) for key, label in DYNAMICS]
    if any(GUARD[0] in r for curves in runs.values() for r in curves[0].train_records):
        panels.append((_key(GUARD[0]), GUARD[1], 0.0))
    title = f"{name}: replay over the run (median over seeds, rolling mean of 10 iterations)"
    return _iteration_panels(runs, styles, path, panels, title)


def plot_controller(
    name: str, runs: dict[str, list[RunCurves]], styles: dict[str, dict[str, Any]], path: Path
) -> Path | None:
    """The replay controller's signals over the run, with the default thresholds dotted (its
    entropy floor is relative to the run's start), for the methods whose runs log them."""
    traced = {
        m: c for m, c in runs.items() if any("anneal/entropy" in r for r in c[0].train_records)
    }
    if not traced:
        return None
    title = (
        f"{name}: the replay controller's signals (median over seeds; dotted = default threshold)"
    )
    return _iteration_panels(traced, styles, path, list(CONTROLLER), title)


def _reward_gap(r: dict[str, Any]) -> float | None:
    learned, verified = r.get("reward/correct_rate"), r.get("reward/verifier_correct_rate")
    return None if learned is None or verified is None else float(learned) - float(verified)


REWARD_GAP: tuple[Panel, ...] = (
    (_key("reward/correct_rate"), "fresh success rate by the reward model", None),
    (_key("reward/verifier_correct_rate"), "fresh correct rate by the verifier", None),
    (_reward_gap, "reward model − verifier (reward hacking > 0)", 0.0),
    (_key("reward_model/agreement"), "reward model agrees with the verifier", None),
)


def plot_reward_gap(
    name: str, runs: dict[str, list[RunCurves]], styles: dict[str, dict[str, Any]], path: Path
) -> Path | None:
    """With a learned reward model: what it says of the fresh rollouts against what the verifier
    says, over the run, for the methods whose runs log both."""
    traced = {
        m: c
        for m, c in runs.items()
        if any("reward/verifier_correct_rate" in r for r in c[0].train_records)
    }
    if not traced:
        return None
    title = f"{name}: the learned reward against the verifier (median over seeds)"
    return _iteration_panels(traced, styles, path, list(REWARD_GAP), title)


def _iteration_panels(
    runs: dict[str, list[RunCurves]],
    styles: dict[str, dict[str, Any]],
    path: Path,
    panels: list[Panel],
    title: str,
) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5), dpi=120)
    for ax, (series_of, label, threshold) in zip(axes, panels, strict=True):
        drawn = False
        for method, curves in runs.items():
            series = [
                [v for v in (series_of(r) for r in c.train_records) if v is not None]
                for c in curves
            ]
            length = min((len(v) for v in series), default=0)
            if length == 0:
                continue
            values = np.median(np.array([v[:length] for v in series]), axis=0)
            window = min(10, length)
            smooth = np.convolve(values, np.ones(window) / window, mode="valid")
            ax.plot(np.arange(len(smooth)) + window, smooth, label=method, **styles[method])
            drawn = True
        if threshold is not None:
            ax.axhline(threshold, color="grey", linestyle=":", linewidth=1)
        if not drawn:
            ax.text(0.5, 0.5, "no method logs this", transform=ax.transAxes, ha="center")
        ax.set_xlabel("iteration")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
