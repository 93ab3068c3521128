"""Each seed against on-policy's other seeds, on synthetic logs with hand-counted pairs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llm_replay.experiments.tail import (
    common_target_ratios,
    cross_ratios,
    pair_ratio,
    shares,
    tail_markdown,
    task_tail,
)
from tests.experiments.test_analysis import fake_run

HIGH = [0.1, 0.2, 0.3, 0.4, 0.4, 0.4]  # smoothed over 3: ends at 0.4, first there at evaluation 5
LOW = [0.1, 0.15, 0.25, 0.3, 0.3, 0.3]  # ends at 0.3, never at 0.4
FAST = [0.1, 0.4, 0.4, 0.4, 0.4, 0.4]  # smoothed 0.1, 0.25, 0.3, 0.4: at 0.4 from evaluation 3


def runs(tmp_path: Path, name: str, curves: list[list[float]]) -> dict:
    return {
        s: fake_run(tmp_path / name / f"seed-{s}", c, 1.0, 100, 100) for s, c in enumerate(curves)
    }


def test_a_pair_is_the_compute_to_the_references_final_over_the_references(tmp_path: Path) -> None:
    base = runs(tmp_path, "base", [HIGH, LOW])
    fast = runs(tmp_path, "fast", [FAST])
    assert pair_ratio(fast[0], base[0], "mu_5") == pytest.approx(3 / 5)
    assert pair_ratio(base[1], base[0], "mu_5") == math.inf  # LOW never reaches 0.4
    assert pair_ratio(base[0], base[1], "mu_5") < 1  # HIGH is at 0.3 before LOW is


def test_on_policy_against_itself_uses_every_other_seed_and_the_excess_is_the_methods(
    tmp_path: Path,
) -> None:
    base = runs(tmp_path, "base", [HIGH, LOW, HIGH])
    own = cross_ratios(base, base, "mu_5")
    assert len(own) == 6  # 3 × 2 ordered pairs of different seeds
    assert sum(math.isinf(r) for r in own) == 2  # LOW against either HIGH
    method = runs(tmp_path, "method", [FAST, FAST, FAST])
    tail = task_tail(method, base, "mu_5")
    assert tail["baseline_against_itself"]["never"] == pytest.approx(2 / 6)
    assert tail["cross"]["pairs"] == 6 and tail["cross"]["above_1"] == 0.0
    assert tail["excess_above_1"] == pytest.approx(-tail["baseline_against_itself"]["above_1"])
    assert list(tail["paired"]) == ["0", "1", "2"]
    assert "| t | m | 3 |" in tail_markdown({"t": {"m": tail}})


def test_a_common_target_takes_the_targets_luck_out(tmp_path: Path) -> None:
    base = runs(tmp_path, "base", [HIGH, FAST])  # both end at 0.4: reached at evaluations 5 and 3
    method = runs(tmp_path, "method", [FAST, HIGH, LOW])
    ratios = common_target_ratios(method, base, "mu_5")  # over the median, 4 evaluations
    assert ratios[0] == pytest.approx(3 / 4) and ratios[1] == pytest.approx(5 / 4)
    assert ratios[2] == math.inf
    most_never = runs(tmp_path, "most", [HIGH, LOW, LOW])  # the median seed never reaches 0.33
    assert common_target_ratios(method, most_never, "mu_5") == {0: None, 1: None, 2: None}


def test_shares_count_never_as_above_one() -> None:
    out = shares([0.5, 2.0, math.inf, 0.8])
    assert out["above_1"] == 0.5 and out["never"] == 0.25 and out["worst"] == math.inf
    assert shares([]) == {"pairs": 0}
