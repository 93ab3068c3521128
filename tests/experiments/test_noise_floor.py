"""The baseline read against itself, on synthetic logs with hand-counted splits."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.experiments.across_tasks import task_reading
from llm_replay.experiments.noise_floor import (
    noise_floor_markdown,
    split_readings,
    suite_noise_floor,
    task_noise_floor,
)
from tests.experiments.test_analysis import fake_run

A = [0.1, 0.2, 0.3, 0.4, 0.4, 0.4]
B = [0.1, 0.15, 0.25, 0.35, 0.35, 0.35]  # A less 5 points after the start


def runs(tmp_path: Path, curves: list[list[float]]) -> dict:
    return {s: fake_run(tmp_path / f"seed-{s}", c, 1.0, 100, 100) for s, c in enumerate(curves)}


def test_identical_runs_never_fail(tmp_path: Path) -> None:
    floor = task_noise_floor(runs(tmp_path, [A] * 4), task_reading)
    assert floor["splits"] == 4
    assert floor["fails"] == {
        "ratio_above_1": 0.0,
        "below_band": 0.0,
        "entropy_not_kept": 0.0,
        "pass_not_kept": 0.0,
    }
    assert floor["ratios"] == [1.0] * 4 and floor["worst_margins"] == [0.0] * 4


def test_one_weaker_run_fails_only_the_split_that_reads_it_as_the_method(tmp_path: Path) -> None:
    # splits of A A A B into 3 + 1: B read as the method once (below the band by 5 points, never
    # reaching A's final accuracy); in the other three B is in the band, whose floor it sets
    readings = split_readings(runs(tmp_path, [A, A, A, B]), task_reading)
    assert [r["baseline_runs"] for r in readings] == [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]
    assert readings[0]["ratio"] is None
    assert readings[0]["worst_margin"] == pytest.approx(-5.0)
    for r in readings[1:]:  # margins are on smoothed curves (3 evaluations): A's lead is 2.5 at
        assert r["ratio"] == pytest.approx(1.0)  # the first evaluation after the start
        assert r["worst_margin"] == pytest.approx(2.5)
    floor = task_noise_floor(runs(tmp_path / "again", [A, A, A, B]), task_reading)
    assert floor["fails"]["ratio_above_1"] == floor["fails"]["below_band"] == 0.25


def test_across_tasks_some_task_fails_with_the_tasks_independent(tmp_path: Path) -> None:
    weak = task_noise_floor(runs(tmp_path / "w", [A, A, A, B]), task_reading)  # 1 of 4 fails
    flat = task_noise_floor(runs(tmp_path / "f", [A] * 4), task_reading)
    both = {"weak": weak, "twice": {**weak, "no_gain": True}, "flat": flat}
    floor = suite_noise_floor(both, gain_tasks={"weak", "flat"})
    assert floor["any_task_fails"]["below_band"] == pytest.approx(1 - 0.75 * 0.75)
    assert floor["any_task_fails"]["ratio_above_1"] == pytest.approx(0.25)  # "twice": no gain
    text = noise_floor_markdown(floor)
    assert "| weak | self | 4 | 25% | 25% | 0% | 0% | 1.00–1.00× (1 never) |" in text
    assert "| self | 25% | 44% | 0% | 0% |" in text  # the ratio test skips "twice" (no gain)
    assert "| twice | self | 4 | no gain | 25% |" in text


def test_a_method_is_read_over_the_same_splits_on_the_seeds_outside_the_band(
    tmp_path: Path,
) -> None:
    base = runs(tmp_path / "base", [A, A, A, B])
    same = runs(tmp_path / "same", [A, A, A, A])
    weaker = runs(tmp_path / "weaker", [B, B, B, B])
    partial = runs(tmp_path / "partial", [A, A, A])  # no seed 3
    floor = task_noise_floor(
        base, task_reading, methods={"same": same, "weaker": weaker, "partial": partial}
    )
    assert floor["methods"]["same"]["fails"]["below_band"] == 0.0
    assert floor["methods"]["same"]["fails"]["ratio_above_1"] == 0.0
    # read on the seed outside the band, paired with the band's first run (always an A): B never
    # reaches an A target; it is below the band only when the band is A, A, A
    weak = floor["methods"]["weaker"]
    assert weak["fails"]["ratio_above_1"] == 1.0 and weak["fails"]["below_band"] == 0.25
    assert floor["methods"]["partial"]["splits"] == 3  # read on seeds 0-2: seed 3 in the band
    suite = suite_noise_floor({"t": floor}, gain_tasks={"t"})
    assert suite["methods_any_task_fails"]["weaker"]["ratio_above_1"] == 1.0
    assert "| t | weaker | 4 | 100% | 25% |" in noise_floor_markdown(suite)


def test_too_few_runs_to_split_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="3 runs: a split needs 3 baseline runs"):
        split_readings(runs(tmp_path, [A] * 3), task_reading)


def test_more_runs_than_twice_the_band_pair_round_the_band(tmp_path: Path) -> None:
    floor = task_noise_floor(runs(tmp_path, [A] * 7), task_reading)  # 4 read against 3
    assert floor["splits"] == 35 and floor["fails"]["below_band"] == 0.0
