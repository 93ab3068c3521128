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


def _run(tmp_path, name: str, anneal: bool):
    from pathlib import Path

    from llm_replay.experiments.analysis import RunCurves

    records = []
    for i in range(30):
        train = {"kind": "train", "iteration": i + 1, "steps": i + 1}
        if anneal:
            train |= {
                "anneal/entropy": 0.7 - 0.01 * i,
                "anneal/reward_gain": 0.05 - 0.002 * i,
                "anneal/scale": 0.97**i,
                "signals/log_ratio_m2": 0.01,
                "signals/stale_fraction": 0.5,
            }
        records.append(train)
    evals = ({"kind": "eval", "iteration": 0, "eval/accuracy": 0.1},)
    return RunCurves(Path(tmp_path) / name, evals, tuple(records))


def test_the_controller_plot_draws_the_runs_that_log_its_signals(tmp_path) -> None:
    from llm_replay.experiments.report import plot_controller

    runs = {"on_policy": [_run(tmp_path, "a", False)], "anneal": [_run(tmp_path, "b", True)]}
    styles = _styles(list(runs), "on_policy")
    assert (
        plot_controller("x", {"on_policy": runs["on_policy"]}, styles, tmp_path / "c.png") is None
    )
    path = plot_controller("x", runs, styles, tmp_path / "c.png")
    assert path is not None and path.stat().st_size > 10_000


def test_the_accuracy_plot_is_drawn_on_the_mu_5_axis_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The demo's claim is on the μ = 5 basis, so its plot draws that axis (from each eval
    record's counts) beside measured seconds, with the machine's measured μ in the footnote."""
    import json

    from llm_replay.experiments.report import cost_curve, measured_mu, plot_accuracy_vs_compute

    run = tmp_path / "run"
    run.mkdir()
    records = [
        {"kind": "eval", "eval/accuracy": 0.2, "steps": 0, "compute/seconds": 0.0,
         "compute/tokens_generated": 0, "compute/completion_tokens_trained": 0},
        {"kind": "train", "compute/mu": 0.37},
        {"kind": "eval", "eval/accuracy": 0.3, "steps": 4, "compute/seconds": 9.0,
         "compute/tokens_generated": 100, "compute/completion_tokens_trained": 250},
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cost_curve(run, "mu_5") == [0.0, 100 * 5 + 250]
    assert measured_mu(run) == 0.37
    png = plot_accuracy_vs_compute([("a run", run)], tmp_path / "plot.png")
    assert png.stat().st_size > 10_000


def test_more_methods_than_colours_come_round_dash_dotted() -> None:
    names = ["on_policy", *(f"m{i}" for i in range(25))]
    styles = _styles(names, "on_policy")
    assert len(styles) == 26
    assert styles["m0"]["color"] == styles["m18"]["color"]
    assert "linestyle" not in styles["m0"] and styles["m18"]["linestyle"] == "-."


def test_a_median_line_stops_where_most_of_its_seeds_have_ended(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Three seeds ending at 20, 20 and 29 steps: past 20 only one seed is left, and the line
    and band stop there instead of drawing that seed as the median."""
    from pathlib import Path

    import numpy as np

    from llm_replay.experiments.analysis import RunCurves
    from llm_replay.experiments.report import _band

    def run(name: str, last: int, level: float) -> RunCurves:
        evals = tuple(
            {"kind": "eval", "iteration": i, "steps": i, "eval/accuracy": level}
            for i in range(0, last + 1, 5)
        )
        return RunCurves(Path(tmp_path) / name, evals, ())

    drawn: dict[str, np.ndarray] = {}

    class Axes:
        def plot(self, x, y, **_):  # type: ignore[no-untyped-def]
            drawn["x"], drawn["y"] = np.asarray(x), np.asarray(y)

            class Line:
                def get_color(self) -> str:
                    return "k"

            return (Line(),)

        def fill_between(self, x, low, high, **_):  # type: ignore[no-untyped-def]
            drawn["high"] = np.asarray(high)

        def grid(self, **_):  # type: ignore[no-untyped-def]
            pass

    runs = {"m": [run("a", 20, 0.2), run("b", 20, 0.2), run("c", 29, 0.9)]}
    _band(Axes(), runs, "accuracy", "steps")
    x, y = drawn["x"], drawn["y"]
    assert np.all(np.isfinite(y[x <= 20])) and np.all(np.isnan(y[x > 20]))
    assert np.all(np.isnan(drawn["high"][x > 20])) and np.nanmax(drawn["high"]) > 0.2
