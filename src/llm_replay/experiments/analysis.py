"""Curves and comparisons from run logs: compute on every basis, smoothed accuracy, targets.

All numbers come from `metrics.jsonl`, so a comparison can be recomputed without re-running.
Each evaluation record carries the meter's counts and seconds, so its compute is known on every
basis (`metrics.compute.cost_on_basis`). Greedy accuracy moves a few points between neighbouring
evaluations, so targets and reach times use a trailing mean over `SMOOTH` evaluations: a method
*reaches* a target at the first evaluation whose smoothed accuracy is at or above it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.experiments.guard_reading import guard_columns
from llm_replay.metrics.compute import cost_on_basis
from llm_replay.metrics.logging import read_log

SMOOTH = 3
# A run whose smoothed accuracy still climbs faster than this over the last fifth of its budget
# (accuracy points per tenth of the run) has not reached its plateau. On chain_sum the baseline
# ended at +0.90 and, continued to twice the budget, rose 3.3 points more, ending at +0.09.
PLATEAU_SLOPE = 0.5


@dataclass(frozen=True)
class RunCurves:
    """One run's evaluations, in order."""

    run_dir: Path
    records: tuple[dict[str, Any], ...]
    train_records: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, run_dir: Path) -> RunCurves:
        log = read_log(run_dir)
        evals = tuple(r for r in log if r.get("kind") == "eval")
        if not evals:
            raise ValueError(f"{run_dir}: no evaluation records in metrics.jsonl")
        return cls(run_dir, evals, tuple(r for r in log if r.get("kind") == "train"))

    def compute(self, basis: str) -> np.ndarray:
        return np.array([cost_on_basis(basis, r) for r in self.records])

    def metric(self, key: str) -> np.ndarray:
        return np.array([np.nan if r.get(key) is None else float(r[key]) for r in self.records])

    @property
    def steps(self) -> np.ndarray:
        return self.metric("steps")

    @property
    def accuracy(self) -> np.ndarray:
        return self.metric("eval/accuracy")

    @property
    def smoothed(self) -> np.ndarray:
        acc = self.accuracy
        return np.array([acc[max(0, i - SMOOTH + 1) : i + 1].mean() for i in range(len(acc))])

    @property
    def final(self) -> dict[str, float]:
        last = self.records[-1]
        return {k: float(v) for k, v in last.items() if k.startswith("eval/") and v is not None}

    def reach(self, target: float, basis: str) -> float | None:
        """Compute on `basis` at the first evaluation whose smoothed accuracy >= target."""
        hits = np.flatnonzero(self.smoothed >= target - 1e-12)
        return float(self.compute(basis)[hits[0]]) if hits.size else None

    @property
    def seed(self) -> int | None:
        """The seed of a run directory named `seed-S` (how `compare` lays runs out), else None."""
        name = self.run_dir.name
        return int(name[5:]) if name.startswith("seed-") and name[5:].isdigit() else None

    def tail_slope(self, basis: str, share: float = 0.2) -> float | None:
        """Slope of the smoothed accuracy over the last `share` of the run's compute, in accuracy
        points per tenth of the run: how far from a plateau the run ended (None: too few evals)."""
        x = self.compute(basis)
        if len(x) < 3 or x[-1] <= 0:
            return None
        tail = x >= (1.0 - share) * x[-1]
        if tail.sum() < 3:
            return None
        slope = np.polyfit(x[tail] / x[-1], 100.0 * self.smoothed[tail], 1)[0]
        return float(slope / 10.0)

    def saturation(self, basis: str) -> dict[str, float] | None:
        """Fit accuracy(x) = a − (a − b)·exp(−x / τ) to the evaluations on `basis` and return the
        asymptote a and `rise_done`, 1 − exp(−X / τ): the share of the fitted rise reached by
        the run's last compute X. A near-1 `rise_done` says the run ended on its plateau, which
        the tail slope (a straight line through a few noisy evaluations) cannot say alone. None
        with fewer than five evaluations or when the fit does not converge."""
        x = self.compute(basis)
        y = self.accuracy
        if len(x) < 5 or x[-1] <= 0 or not np.isfinite(y).all():
            return None
        from scipy.optimize import curve_fit

        def model(u: np.ndarray, a: float, b: float, tau: float) -> np.ndarray:
            return a - (a - b) * np.exp(-u / tau)

        scale = float(x[-1])
        try:
            (a, _, tau), _ = curve_fit(
                model,
                x / scale,
                y,
                p0=(float(y[-3:].mean()), float(y[0]), 0.3),
                bounds=((0.0, 0.0, 1e-3), (1.0, 1.0, 100.0)),
                maxfev=20_000,
            )
        except (RuntimeError, ValueError):
            return None
        return {"asymptote": float(a), "rise_done": float(1.0 - np.exp(-1.0 / tau))}

    @property
    def reuse(self) -> float:
        """Completion tokens trained on per completion token generated, over the whole run: the
        replay ratio y on the token basis (1 for on-policy GRPO; NaN before anything was generated).

        It links the bases: a method's cost ratio on the μ basis is its ratio of generated tokens
        × (μ + y) / (μ + y_baseline), and the ratio of generated tokens is the rollouts ratio when
        completions are as long as the baseline's."""
        last = self.records[-1]
        generated = float(last.get("compute/tokens_generated") or 0.0)
        trained = float(last.get("compute/completion_tokens_trained") or 0.0)
        return trained / generated if generated > 0 else float("nan")

    def mean_train(self, key: str, last: float = 1.0) -> float | None:
        """The mean of `key` over the training records (over the last `last` share of them)."""
        values = [float(r[key]) for r in self.train_records if r.get(key) is not None]
        values = values[int(len(values) * (1.0 - last)) :]
        return float(np.mean(values)) if values else None

    def reward_model_share(self) -> float | None:
        """The learned reward model's share of the run's μ = 5 cost at its end (None without
        one)."""
        last = self.records[-1]
        cost = last.get("compute/reward_model_cost")
        return None if cost is None else float(cost) / cost_on_basis("mu_5", last)


def median_or_none(values: Sequence[float | None]) -> float | None:
    """Median over seeds, counting None (never reached) as +inf; None if the median is infinite."""
    if not values:
        return None
    array = np.array([np.inf if v is None else v for v in values], dtype=float)
    median = float(np.median(array))
    return None if not np.isfinite(median) else median


def median_interval(
    values: Sequence[float | None], *, confidence: float = 0.95, seed: int = 0
) -> list[float | None] | None:
    """A bootstrap confidence interval of the median over seeds (`scipy.stats.bootstrap`,
    percentile method, 9999 resamples), "never reached" counted as +inf; an infinite bound is
    None. None when fewer than two seeds (no spread to resample)."""
    if len(values) < 2:
        return None
    from scipy.stats import bootstrap

    array = np.array([np.inf if v is None else v for v in values], dtype=float)
    if np.all(array == array[0]):
        bounds = (array[0], array[0])
    else:
        with np.errstate(invalid="ignore"):  # medians of resamples that hold +inf
            result = bootstrap(
                (array,),
                np.median,
                confidence_level=confidence,
                n_resamples=9999,
                method="percentile",
                rng=np.random.default_rng(seed),
            )
        bounds = (result.confidence_interval.low, result.confidence_interval.high)
    return [float(b) if np.isfinite(b) else None for b in bounds]


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max over seeds, and a bootstrap 95% interval of the median (2+ seeds)."""
    array = np.asarray(values, dtype=float)
    out: dict[str, Any] = {
        "median": float(np.median(array)),
        "min": float(array.min()),
        "max": float(array.max()),
    }
    if len(array) > 1 and np.isfinite(array).all():
        out["ci95"] = median_interval(list(array))
    return out


def on_grid(curves: Sequence[RunCurves], key: str, basis: str, grid: np.ndarray) -> np.ndarray:
    """[seeds, len(grid)]: each run's value at each grid point (its last evaluation at or before it)."""
    out = np.full((len(curves), len(grid)), np.nan)
    for i, run in enumerate(curves):
        x = run.compute(basis) if basis != "steps" else run.steps
        y = run.smoothed if key == "accuracy" else run.metric(key)
        idx = np.searchsorted(x, grid, side="right") - 1
        valid = (idx >= 0) & (grid <= x[-1])
        out[i, valid] = y[idx[valid]]
    return out


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None:
        return None
    if reference == 0:  # the baseline's final accuracy was already there at the start
        return 1.0 if value == 0 else None
    return value / reference


def compare_methods(
    runs: dict[str, list[RunCurves]], *, baseline: str, bases: Sequence[str]
) -> dict[str, Any]:
    """Per method: accuracy, pass@k, entropy, μ, age, reuse, the share of generated groups whose
    rewards were all equal (no GRPO signal), and compute to reach the baseline's final accuracy.

    Seeds are paired: seed s of a method is measured against seed s of the baseline (same prompt
    order and sampling stream), so the baseline must have run every seed a method has; methods may
    have fewer seeds than the baseline (the plateau experiment gives the baseline and the two best
    methods five, the others three). The target of seed s is the baseline's smoothed final accuracy on
    that seed, and the baseline's compute is what it took to first reach it. A method's ratio on a
    basis is the median over seeds of (its compute to reach the target ÷ the baseline's), with
    "never reached" counted as infinite: null when the median seed never got there; beside it, a
    bootstrap 95% interval of that median over seeds (`median_interval`).
    """
    if baseline not in runs:
        raise ValueError(f"baseline = {baseline!r}: not among the methods {sorted(runs)}")
    reference = {_seed(r, i): r for i, r in enumerate(runs[baseline])}
    target_of = {s: r.smoothed[-1] for s, r in reference.items()}
    cost_of = {b: {s: r.reach(target_of[s], b) for s, r in reference.items()} for b in bases}
    methods: dict[str, Any] = {}
    for name, curves in runs.items():
        seeds = [_seed(c, i) for i, c in enumerate(curves)]
        missing = [s for s in seeds if s not in reference]
        if missing:
            raise ValueError(f"{name}: seed(s) {missing} have no baseline run to pair with")
        finals = [c.final for c in curves]
        targets = [target_of[s] for s in seeds]
        reach = {b: [c.reach(t, b) for c, t in zip(curves, targets, strict=True)] for b in bases}
        per_seed = {
            b: [_ratio(v, cost_of[b][s]) for v, s in zip(reach[b], seeds, strict=True)]
            for b in bases
        }
        ratio = {b: median_or_none(per_seed[b]) for b in bases}
        pass_keys = sorted({k for f in finals for k in f if k.startswith("eval/pass@")})
        methods[name] = {
            "seeds": len(curves),
            "seed_ids": seeds,
            "final_accuracy": spread([c.smoothed[-1] for c in curves]),
            "final_accuracy_last_eval": spread([f["eval/accuracy"] for f in finals]),
            "best_accuracy": spread([float(np.nanmax(c.smoothed)) for c in curves]),
            **{k.split("/")[1]: spread([f[k] for f in finals]) for k in pass_keys},
            "entropy": spread([f.get("eval/entropy", np.nan) for f in finals]),
            "mu_measured": median_or_none([c.records[-1].get("compute/mu") for c in curves]),
            "mean_sampled_age": median_or_none([c.mean_train("train/age_mean") for c in curves]),
            "reuse": spread([c.reuse for c in curves]),
            "zero_variance_groups": median_or_none(
                [c.mean_train("reward/zero_variance_groups") for c in curves]
            ),
            "gradient_steps": spread([float(c.steps[-1]) for c in curves]),
            "accuracy_gain_equal_mu_5": _spread_or_none(
                [accuracy_gain(c, reference[s], "mu_5") for c, s in zip(curves, seeds, strict=True)]
            ),
            "tail_slope_mu_5": median_or_none([c.tail_slope("mu_5") for c in curves]),
            "worst_margin_mu_5": worst_margin(curves, runs[baseline], "mu_5"),
            **_reward_model_columns(curves),
            **guard_columns([c.train_records for c in curves]),
            "saturation_mu_5": _saturation([c.saturation("mu_5") for c in curves]),
            "compute_to_target": {b: median_or_none(reach[b]) for b in bases},
            "compute_to_target_ratio": ratio,
            "compute_to_target_ratio_ci95": {b: median_interval(per_seed[b]) for b in bases},
            "compute_to_target_ratio_per_seed": per_seed,
            "never_reached_seeds": {b: sum(v is None for v in reach[b]) for b in bases},
        }
    return {
        "baseline": baseline,
        "baseline_plateau": plateau_verdict(runs[baseline]),
        "target_accuracy": float(np.median(list(target_of.values()))),
        "target_accuracy_per_seed": [float(t) for t in target_of.values()],
        "baseline_compute": {b: median_or_none(list(v.values())) for b, v in cost_of.items()},
        "methods": methods,
    }


def _reward_model_columns(curves: Sequence[RunCurves]) -> dict[str, Any]:
    """With a learned reward model: its share of the μ = 5 cost, and over the last fifth of the
    run its success rate on fresh rollouts and the verifier's (medians over seeds)."""
    shares = [c.reward_model_share() for c in curves]
    if all(s is None for s in shares):
        return {}
    return {
        "reward_model_share_mu_5": median_or_none(shares),
        "reward_model_success_late": median_or_none(
            [c.mean_train("reward/correct_rate", last=0.2) for c in curves]
        ),
        "verifier_correct_late": median_or_none(
            [c.mean_train("reward/verifier_correct_rate", last=0.2) for c in curves]
        ),
    }


def margins(
    curves: Sequence[RunCurves], reference: Sequence[RunCurves], basis: str, after: float = 0.1
) -> tuple[np.ndarray, np.ndarray, float]:
    """(the points, the margins there, the reference's budget): over 80 equal-compute points from
    `after` of the reference's budget to its end, this method's median accuracy minus the floor
    of the reference's seed band, in points (NaN where either is unread). Points before every
    reference seed's first evaluation after the start are left out: there every run still reads
    its base accuracy."""
    end = min(float(r.compute(basis)[-1]) for r in reference)
    first = max((float(r.compute(basis)[1]) for r in reference if len(r.records) > 1), default=0)
    grid = np.linspace(end / 80, end, 80)
    grid = grid[grid >= max(after * end, first)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        floor = np.nanmin(on_grid(reference, "accuracy", basis, grid), axis=0)
        mine = np.nanmedian(on_grid(curves, "accuracy", basis, grid), axis=0)
    return grid, (mine - floor) * 100.0, end


def worst_margin(
    curves: Sequence[RunCurves], reference: Sequence[RunCurves], basis: str, after: float = 0.1
) -> float | None:
    """The least of `margins`: >= 0 means never below the reference beyond its seed interval
    after `after` of its budget (what `delta_vs_compute.png` draws)."""
    margin = margins(curves, reference, basis, after)[1]
    margin = margin[np.isfinite(margin)]
    return float(margin.min()) if len(margin) else None


def accuracy_gain(run: RunCurves, reference: RunCurves, basis: str) -> float | None:
    """The run's smoothed accuracy minus the reference's at the same compute: where the shorter
    of the two ended (the iso-compute reading, defined also when the run never reaches the
    reference's final accuracy)."""
    x = min(float(run.compute(basis)[-1]), float(reference.compute(basis)[-1]))
    mine, theirs = on_grid([run, reference], "accuracy", basis, np.array([x]))[:, 0]
    return None if np.isnan(mine) or np.isnan(theirs) else float(mine - theirs)


def _spread_or_none(values: Sequence[float | None]) -> dict[str, Any] | None:
    known = [v for v in values if v is not None]
    return spread(known) if known else None


def plateau_verdict(curves: Sequence[RunCurves]) -> dict[str, Any]:
    """Did these runs end on their plateau? The median over seeds of the tail slope (points per
    tenth of the run, μ = 5 basis) against `PLATEAU_SLOPE`, with its bootstrap interval.
    `on_plateau` is None when the runs have too few evaluations to say."""
    slopes = [c.tail_slope("mu_5") for c in curves]
    known = [s for s in slopes if s is not None]
    median = float(np.median(known)) if known else None
    return {
        "tail_slope": median,
        "tail_slope_ci95": median_interval(known) if len(known) > 1 else None,
        "per_seed": slopes,
        "threshold": PLATEAU_SLOPE,
        "on_plateau": None if median is None else bool(median <= PLATEAU_SLOPE),
    }


def _saturation(fits: Sequence[dict[str, float] | None]) -> dict[str, Any] | None:
    """Median over seeds of each fitted field; None when no seed's fit converged."""
    done = [f for f in fits if f is not None]
    if not done:
        return None
    return {
        "asymptote": float(np.median([f["asymptote"] for f in done])),
        "rise_done": float(np.median([f["rise_done"] for f in done])),
        "fitted_seeds": len(done),
    }


def _seed(run: RunCurves, index: int) -> int:
    seed = run.seed
    return index if seed is None else seed
