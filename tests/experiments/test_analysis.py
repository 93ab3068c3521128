"""Comparison arithmetic on synthetic logs: smoothing, reach, paired ratios, bases."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.experiments.analysis import (
    RunCurves,
    compare_methods,
    median_or_none,
    worst_margin,
)
from llm_replay.metrics import MetricsLogger


def fake_run(
    path: Path, accuracies: list[float], seconds_per_eval: float, gen_tokens: int, train_tokens: int
) -> RunCurves:
    logger = MetricsLogger(path)
    for i, acc in enumerate(accuracies):
        logger.log({
            "kind": "eval", "iteration": i, "steps": i, "eval/accuracy": acc, "eval/pass@1": acc,
            "compute/seconds": i * seconds_per_eval, "compute/rollouts_generated": i * 10,
            "compute/tokens_generated": i * gen_tokens, "compute/completion_tokens_trained": i * train_tokens,
        })  # fmt: skip
    logger.close()
    return RunCurves.load(path)


def test_median_counts_never_as_infinite() -> None:
    assert median_or_none([1.0, 3.0, None]) == 3.0
    assert median_or_none([1.0, None, None]) is None
    assert median_or_none([2.0, 4.0]) == 3.0
    assert median_or_none([]) is None


def test_reach_uses_the_trailing_mean(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "r", [0.1, 0.5, 0.2, 0.3, 0.4], 10.0, 100, 100)
    # smoothed: 0.1, 0.3, 0.2667, 0.3333, 0.3
    assert run.reach(0.3, "measured") == 10.0  # the spike at 10 s counts only through the mean
    assert run.reach(0.33, "measured") == 30.0
    assert run.reach(0.5, "measured") is None


def test_paired_ratios_on_each_basis(tmp_path: Path) -> None:
    # baseline: 100 gen + 100 trained tokens per eval; replay: half the generation, twice the training
    base = [
        fake_run(tmp_path / f"b{s}", [0.1, 0.2, 0.3, 0.4, 0.4, 0.4], 1.0, 100, 100)
        for s in range(3)
    ]
    replay = [
        fake_run(tmp_path / f"r{s}", [0.1, 0.2, 0.3, 0.4, 0.4, 0.4], 1.5, 50, 200) for s in range(3)
    ]
    slow = [
        fake_run(tmp_path / f"s{s}", [0.1, 0.1, 0.1, 0.1, 0.1, 0.1], 1.0, 100, 100)
        for s in range(3)
    ]
    summary = compare_methods(
        {"base": base, "replay": replay, "slow": slow},
        baseline="base",
        bases=["measured", "mu_5", "mu_0.5", "rollouts"],
    )
    assert summary["target_accuracy"] == pytest.approx(0.4)
    ratios = summary["methods"]["replay"]["compute_to_target_ratio"]
    # both reach the smoothed 0.4 at the 6th eval (index 5): ratios are per-eval cost ratios
    assert ratios["measured"] == pytest.approx(1.5)
    assert ratios["mu_5"] == pytest.approx((50 * 5 + 200) / (100 * 5 + 100))
    assert ratios["mu_0.5"] == pytest.approx((50 * 0.5 + 200) / (100 * 0.5 + 100))
    assert ratios["rollouts"] == pytest.approx(1.0)
    assert summary["methods"]["replay"]["reuse"]["median"] == pytest.approx(200 / 50)
    assert summary["methods"]["base"]["reuse"]["median"] == pytest.approx(1.0)
    # the bases are linked through reuse: mu ratio = generated-token ratio x (mu + y) / (mu + y_base)
    assert ratios["mu_5"] == pytest.approx((50 / 100) * (5 + 4.0) / (5 + 1.0))
    assert summary["methods"]["slow"]["compute_to_target_ratio"]["mu_5"] is None
    # at equal μ = 5 compute: replay ends at 5 x 450 = 2250, where the baseline's last eval is the
    # 4th (1800; smoothed mean of 0.2, 0.3, 0.4); "slow" never reaches the target but has a gain
    gain = summary["methods"]["replay"]["accuracy_gain_equal_mu_5"]
    assert gain["median"] == pytest.approx(0.4 - 0.3)
    assert summary["methods"]["slow"]["accuracy_gain_equal_mu_5"]["median"] == pytest.approx(-0.3)
    assert summary["methods"]["base"]["accuracy_gain_equal_mu_5"]["median"] == 0.0
    assert summary["methods"]["slow"]["never_reached_seeds"]["mu_5"] == 3
    with pytest.raises(ValueError, match="baseline = 'nope'"):
        compare_methods({"base": base}, baseline="nope", bases=["measured"])


def test_median_interval_is_a_bootstrap_interval_of_the_median() -> None:
    from llm_replay.experiments.analysis import median_interval

    assert median_interval([0.5]) is None  # one seed: nothing to resample
    assert median_interval([0.5, 0.5, 0.5]) == [0.5, 0.5]
    low, high = median_interval([0.4, 0.5, 0.6, 0.45, 0.55])  # type: ignore[misc]
    assert low is not None and high is not None and 0.4 <= low < 0.5 < high <= 0.6
    assert median_interval([0.4, None, 0.5])[1] is None  # type: ignore[index]  # never reached


def test_saturation_fit_tells_a_plateau_from_a_climb(tmp_path: Path) -> None:
    import numpy as np

    share = np.linspace(0.0, 1.0, 21)
    plateau = 0.6 - 0.4 * np.exp(-share / 0.25)  # a = 0.6, b = 0.2, τ = a quarter of the run
    fit = fake_run(tmp_path / "p", list(plateau), 1.0, 100, 100).saturation("mu_5")
    assert fit is not None
    assert fit["asymptote"] == pytest.approx(0.6, abs=1e-3)
    assert fit["rise_done"] == pytest.approx(1 - np.exp(-4.0), abs=1e-3)
    climb = fake_run(tmp_path / "c", list(0.1 + 0.4 * share), 1.0, 100, 100).saturation("mu_5")
    assert climb is not None and climb["rise_done"] < 0.5  # a straight line is far from a plateau
    assert fake_run(tmp_path / "s", [0.1, 0.2, 0.3], 1.0, 100, 100).saturation("mu_5") is None


def test_zero_variance_share_is_the_run_mean_then_the_seed_median(tmp_path: Path) -> None:
    def run(name: str, shares: list[float] | None) -> RunCurves:
        logger = MetricsLogger(tmp_path / name)
        for i, share in enumerate(shares or [0.0, 0.0]):
            train = {"kind": "train", "iteration": i, "steps": i}
            if shares is not None:
                train["reward/zero_variance_groups"] = share
            logger.log(train)
            logger.log({
                "kind": "eval", "iteration": i, "steps": i, "eval/accuracy": 0.1 * i,
                "compute/seconds": float(i), "compute/rollouts_generated": 10 * i,
                "compute/tokens_generated": 10 * i, "compute/completion_tokens_trained": 10 * i,
            })  # fmt: skip
        logger.close()
        return RunCurves.load(tmp_path / name)

    runs = {"base": [run("a", [0.5, 0.3]), run("b", [0.9, 0.7]), run("c", [0.2, 0.0])]}
    runs["old"] = [run("d", None)]  # a log from before the metric existed
    summary = compare_methods(runs, baseline="base", bases=["rollouts"])
    assert summary["methods"]["base"]["zero_variance_groups"] == pytest.approx(0.4)
    assert summary["methods"]["old"]["zero_variance_groups"] is None


def test_plateau_verdict_reads_the_baselines_tail_slope(tmp_path: Path) -> None:
    import numpy as np

    from llm_replay.experiments.analysis import PLATEAU_SLOPE, plateau_verdict
    from llm_replay.experiments.comparison_table import plateau_note

    share = np.linspace(0.0, 1.0, 21)
    climbs = [
        fake_run(tmp_path / f"c{s}", list(0.1 + (0.3 + 0.1 * s) * share), 1.0, 100, 100)
        for s in range(3)
    ]  # 30, 40 and 50 points over the run: 3, 4 and 5 points per tenth of it
    verdict = plateau_verdict(climbs)
    assert verdict["per_seed"] == pytest.approx([3.0, 4.0, 5.0])
    assert verdict["tail_slope"] == pytest.approx(4.0)
    assert verdict["on_plateau"] is False and verdict["threshold"] == PLATEAU_SLOPE
    flat = [fake_run(tmp_path / f"f{s}", [0.1, 0.3] + [0.5] * 19, 1.0, 100, 100) for s in range(2)]
    assert plateau_verdict(flat)["tail_slope"] == pytest.approx(0.0, abs=1e-9)
    assert plateau_verdict(flat)["on_plateau"] is True
    short = [fake_run(tmp_path / "s", [0.1, 0.2], 1.0, 100, 100)]
    assert plateau_verdict(short)["on_plateau"] is None

    rising = compare_methods({"base": climbs}, baseline="base", bases=["mu_5"])
    assert rising["baseline_plateau"]["on_plateau"] is False
    note = plateau_note(rising)
    assert note is not None and "still rising" in note and "+4.00" in note and "3 seeds" in note
    settled = plateau_note(compare_methods({"base": flat}, baseline="base", bases=["mu_5"]))
    assert settled is not None and "ends on its plateau" in settled
    assert plateau_note({"baseline": "base"}) is None  # a summary written before the verdict


def test_a_plateau_call_whose_interval_spans_the_threshold_says_it_is_weak(tmp_path: Path) -> None:
    import numpy as np

    from llm_replay.experiments.comparison_table import plateau_note

    share = np.linspace(0.0, 1.0, 21)
    runs = [
        fake_run(tmp_path / f"m{s}", list(0.4 + slope * share), 1.0, 100, 100)
        for s, slope in enumerate([-0.1, 0.02, 0.2, -0.05, 0.25])  # -1, 0.2, 2, -0.5, 2.5 a tenth
    ]
    note = plateau_note(compare_methods({"base": runs}, baseline="base", bases=["mu_5"]))
    assert note is not None and "ends on its plateau: +0.20" in note and "weak" in note


def test_worst_margin_is_the_least_distance_above_the_baselines_seed_floor(tmp_path: Path) -> None:
    def flat(name: str, level: float) -> RunCurves:
        return fake_run(tmp_path / name, [level] * 6, 1.0, 100, 100)

    base = [flat(f"b{s}", level) for s, level in enumerate((0.40, 0.42, 0.44))]
    above = [flat(f"a{s}", level) for s, level in enumerate((0.43, 0.45, 0.47))]
    below = [flat(f"w{s}", level) for s, level in enumerate((0.30, 0.38, 0.50))]
    assert worst_margin(above, base, "mu_5") == pytest.approx(5.0)  # median 45 − floor 40
    assert worst_margin(below, base, "mu_5") == pytest.approx(-2.0)
    summary = compare_methods({"base": base, "above": above}, baseline="base", bases=["mu_5"])
    assert summary["methods"]["above"]["worst_margin_mu_5"] == pytest.approx(5.0)
    assert summary["methods"]["base"]["worst_margin_mu_5"] == pytest.approx(2.0)


def test_reward_model_columns_from_the_logs(tmp_path: Path) -> None:
    from llm_replay.experiments.comparison_table import reward_model_lines

    logger = MetricsLogger(tmp_path / "rm")
    for i in range(5):
        logger.log({"kind": "train", "iteration": i, "reward/correct_rate": 0.1 * i,
                    "reward/verifier_correct_rate": 0.2})  # fmt: skip
    logger.log({
        "kind": "eval", "iteration": 5, "steps": 5, "eval/accuracy": 0.3,
        "compute/seconds": 1.0, "compute/rollouts_generated": 10, "compute/tokens_generated": 100,
        "compute/completion_tokens_trained": 300, "compute/reward_model_cost": 200.0,
    })  # fmt: skip
    logger.close()
    run = RunCurves.load(tmp_path / "rm")
    assert run.reward_model_share() == pytest.approx(200 / (100 * 5 + 300 + 200))
    assert run.mean_train("reward/correct_rate", last=0.2) == pytest.approx(0.4)
    plain = fake_run(tmp_path / "plain", [0.3], 1.0, 100, 300)
    assert plain.reward_model_share() is None
    summary = {"methods": {"rm": {"reward_model_share_mu_5": 0.2, "reward_model_success_late": 0.4,
                                  "verifier_correct_late": 0.2}, "plain": {}}}  # fmt: skip
    lines = reward_model_lines(summary)
    assert lines[-1] == "| rm | 20.0% | 40.0% | 20.0% | +0.200 |" and len(lines) == 4
    assert reward_model_lines({"methods": {"plain": {}}}) == []
