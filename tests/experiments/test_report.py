"""Plot styles: a continuation is drawn in its base's colour, dashed, under its base."""

from __future__ import annotations

from llm_replay.experiments.report import _styles


def test_a_continuation_takes_its_bases_colour_dashed_and_underneath() -> None:
    names = ["on_policy", "positive", "prioritized", "positive_2x"]
    styles = _styles(names, "on_policy", {"positive_2x": "positive", "gone_2x": "gone"})
    assert styles["on_policy"]["color"] == "black"
    assert styles["positive_2x"]["color"] == styles["positive"]["color"]
    assert styles["positive_2x"]["linestyle"] == "--"
    assert styles["positive_2x"]["zorder"] < 2  # matplotlib draws lines at zorder 2
    assert "linestyle" not in styles["positive"]
    assert styles["prioritized"]["color"] != styles["positive"]["color"]


def test_a_continued_baseline_keeps_black_and_so_does_its_base() -> None:
    styles = _styles(
        ["on_policy", "positive", "on_policy_2x"], "on_policy_2x", {"on_policy_2x": "on_policy"}
    )
    assert styles["on_policy_2x"]["color"] == styles["on_policy"]["color"] == "black"
    assert styles["on_policy_2x"]["linewidth"] > styles["on_policy"]["linewidth"]
    assert styles["on_policy_2x"]["linestyle"] == "--"
    assert styles["positive"]["color"] != "black"


def test_a_tis_variant_is_dashed_in_its_parents_colour() -> None:
    styles = _styles(["on_policy", "uniform", "uniform_tis"], "on_policy")
    assert styles["uniform_tis"]["color"] == styles["uniform"]["color"]
    assert styles["uniform_tis"]["linestyle"] == "--"
