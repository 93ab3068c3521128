"""Whether a method ends above the best tuned on-policy (issue #53): on a plateau every setting
reaches early, a method that climbs past it reads ~1x or worse in compute to on-policy's final
accuracy, and ends credibly above; a hair above is level; a run continued past the budget is read
where the members stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.experiments.across_tasks import suite_markdown, suite_summary
from llm_replay.experiments.analysis import RunCurves, compare_methods
from llm_replay.experiments.envelope import envelope_reading, note_lines
from llm_replay.experiments.final_gap import CREDIBLE, accuracy_at, counts, plot_gaps, verdict
from llm_replay.experiments.resolution import accuracy_error

PLATEAU = [0.35, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47]
LATE_PLATEAU = [0.35, 0.35, 0.46, 0.46, 0.46, 0.46, 0.46, 0.46]
PAST_IT = [0.35, 0.40, 0.46, 0.50, 0.55, 0.60, 0.64, 0.66]  # crosses 0.47 later, ends higher


def run(
    name: str, seed: int, accuracies: list[float], size: int | None = 500, cost: float = 100
) -> RunCurves:
    records = tuple(
        {
            "kind": "eval",
            "iteration": i,
            "steps": i,
            "eval/accuracy": a,
            **({} if size is None else {"eval/size": float(size)}),
            "compute/seconds": float(i),
            "compute/rollouts_generated": 10 * i,
            "compute/tokens_generated": i * cost / 5,
            "compute/completion_tokens_trained": 0.0,
        }
        for i, a in enumerate(accuracies)
    )
    return RunCurves(Path("/nowhere") / name / f"seed-{seed}", records, ())


def plateau_runs(method: list[float], size: int | None = 500) -> dict[str, list[RunCurves]]:
    return {
        "on_policy": [run("on_policy", s, PLATEAU, size) for s in (0, 1)],
        "on_policy_lr2x": [run("on_policy_lr2x", s, LATE_PLATEAU, size) for s in (0, 1)],
        "replay": [run("replay", s, method, size) for s in (0, 1)],
    }


def test_a_method_past_the_plateau_reads_late_but_ends_above() -> None:
    reading = envelope_reading(
        plateau_runs(PAST_IT), baseline="on_policy", sweep=["on_policy_lr2x"]
    )
    ratios = reading["methods"]["replay"]["baseline_final"]["ratio_per_seed"]["mu_5"]
    assert all(r > 1.0 for r in ratios)  # later to on-policy's final: the compute reading
    gap = reading["final_gap"]["methods"]["replay"]
    smoothed_end = sum(PAST_IT[-3:]) / 3
    assert gap["gap_per_seed"] == pytest.approx([100 * (smoothed_end - 0.47)] * 2)
    assert gap["verdict_per_seed"] == ["above", "above"]
    error = 100 * (accuracy_error(smoothed_end, 500) ** 2 + accuracy_error(0.47, 500) ** 2) ** 0.5
    assert gap["error_per_seed"] == pytest.approx([error] * 2)
    members = reading["final_gap"]["methods"]
    assert members["on_policy"]["verdict_per_seed"] == ["level", "level"]  # a member: gap 0
    assert max(members["on_policy_lr2x"]["gap_per_seed"]) <= 0.0
    note = next(line for line in note_lines(reading) if line.startswith("Final accuracy"))
    assert "replay +" in note and "(above)" in note and "on_policy " not in note


def test_a_hair_above_on_few_problems_is_level() -> None:
    hair = [*PLATEAU[:-3], 0.48, 0.48, 0.48]
    reading = envelope_reading(plateau_runs(hair, size=30), baseline="on_policy", sweep=[])
    gap = reading["final_gap"]["methods"]["replay"]
    assert gap["gap_per_seed"] == pytest.approx([1.0, 1.0])
    assert gap["verdict_per_seed"] == ["level", "level"]


def test_a_run_continued_past_the_budget_is_read_where_the_members_stopped() -> None:
    continued = run("replay", 0, [*PLATEAU, *[0.9] * 8])  # twice the members' compute, then 90%
    assert accuracy_at(continued, float(run("m", 0, PLATEAU).compute("mu_5")[-1])) == 0.47
    runs = {"on_policy": [run("on_policy", 0, PLATEAU)], "replay": [continued]}
    gap = envelope_reading(runs, baseline="on_policy", sweep=[])["final_gap"]
    assert gap["methods"]["replay"]["gap_per_seed"] == pytest.approx([0.0])
    assert gap["at_compute_per_seed"] == pytest.approx([700.0])


def test_without_a_problem_count_only_the_gap_is_given() -> None:
    reading = envelope_reading(plateau_runs(PAST_IT, size=None), baseline="on_policy", sweep=[])
    gap = reading["final_gap"]["methods"]["replay"]
    assert gap["verdict_per_seed"] == [None, None] and gap["gap_per_seed"][0] > 15
    assert counts(gap["verdict_per_seed"]) == "—"


def test_the_verdict_is_two_standard_errors_each_way() -> None:
    assert CREDIBLE == 2.0
    assert verdict(4.1, 2.0) == "above" and verdict(-4.1, 2.0) == "below"
    assert verdict(3.9, 2.0) == verdict(-3.9, 2.0) == "level"
    assert counts(["above", "level", "above", "below"]) == "2 / 1 / 1"


def test_a_suite_counts_the_seeds_that_end_above() -> None:
    summaries = {}
    for task, curve in (("plateau", PAST_IT), ("same", PLATEAU)):
        runs = plateau_runs(curve)
        summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
        summary["envelope"] = envelope_reading(runs, baseline="on_policy", sweep=["on_policy_lr2x"])
        summaries[task] = summary
    reading = suite_summary(summaries, baseline="on_policy")
    across = reading["methods"]["replay"]["across"]["vs_tuned"]
    assert across["final_gap_seeds"] == {"above": 2, "level": 2, "below": 0}
    assert across["final_gap_tasks_above"] == 1 and across["final_gap_tasks"] == 2
    row = reading["methods"]["replay"]["tasks"]["plateau"]["vs_tuned"]
    assert row["final_gap_verdict_per_seed"] == ["above", "above"]
    text = suite_markdown(reading)
    assert "Seeds above / level / below over every task: " in text
    assert "replay 2 / 2 / 0" in text
    assert "| replay | plateau | +" in text and "| 2 / 0 / 0 | 0: +" in text


def test_the_gaps_are_drawn_and_a_suite_task_keeps_the_baselines(tmp_path: Path) -> None:
    runs = plateau_runs(PAST_IT)
    reading = envelope_reading(runs, baseline="on_policy", sweep=["on_policy_lr2x"])
    assert reading["final_gap"]["members"] == ["on_policy", "on_policy_lr2x"]
    path = plot_gaps({"plateau": reading["final_gap"]}, ["replay"], tmp_path / "g.png", title="t")
    assert path == tmp_path / "g.png" and path.stat().st_size > 10_000
    assert (
        plot_gaps({"plateau": reading["final_gap"]}, ["absent"], tmp_path / "n.png", title="t")
        is None
    )
    summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
    summary["envelope"] = reading
    suite = suite_summary({"plateau": summary}, baseline="on_policy")
    digest = suite["tasks"]["plateau"]["envelope"]
    assert digest["baseline_final_gap_verdict_per_seed"] == ["level", "level"]
    row = suite["methods"]["replay"]["tasks"]["plateau"]["vs_tuned"]
    assert len(row["final_gap_error_per_seed"]) == 2 and row["final_gap_error_per_seed"][0] > 0
