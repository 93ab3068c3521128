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
from llm_replay.experiments.final_gap import (
    accuracy_at,
    accuracy_spread,
    across,
    counts,
    paired_error,
    plot_gaps,
    row_scores,
    verdict,
)
from llm_replay.experiments.resolution import accuracy_error
from llm_replay.metrics.logging import CORRECT_ROWS
from tests.experiments.test_envelope import run as envelope_run

PLATEAU = [0.35, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47]
LATE_PLATEAU = [0.35, 0.35, 0.46, 0.46, 0.46, 0.46, 0.46, 0.46]
PAST_IT = [0.35, 0.40, 0.46, 0.50, 0.55, 0.60, 0.64, 0.66]  # crosses 0.47 later, ends higher


def run(
    name: str, seed: int, accuracies: list[float], size: int | None = 500, cost: float = 100
) -> RunCurves:
    """`test_envelope.run`'s curves, with `eval/size` (the split's problems) unless None."""
    return envelope_run(
        name, seed, accuracies, cost, **({} if size is None else {"eval/size": size})
    )


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
    # one draw of 500 problems each, no credit for the three evaluations smoothed over
    spread = (smoothed_end * (1 - smoothed_end) / 500 + 0.47 * 0.53 / 500) ** 0.5
    assert gap["error_per_seed"] == pytest.approx([100 * spread] * 2)
    assert accuracy_spread(0.47, 500) == pytest.approx(accuracy_error(0.47, 500) * 3**0.5)
    assert gap["read_at_per_seed"] == pytest.approx([700.0, 700.0])
    members = reading["final_gap"]["methods"]
    assert members["on_policy"]["verdict_per_seed"] == ["level", "level"]  # a member: gap 0
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
    assert accuracy_at(continued, 700.0) == (0.47, 700.0)
    assert accuracy_at(run("m", 0, PLATEAU, cost=101), 700.0) == (0.47, 707.0)  # within 2%
    assert accuracy_at(run("m", 0, PLATEAU, cost=103), 700.0) == (0.47, 618.0)  # 721: past it
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
    assert verdict(4.1, 2.0) == "above" and verdict(-4.1, 2.0) == "below"
    assert verdict(3.9, 2.0) == verdict(-3.9, 2.0) == "level"
    assert counts(["above", "level", "above", "below"]) == "2 / 1 / 1"
    assert counts(["above", None]) == "1 / 0 / 0 (1 without a verdict)"


def test_each_seed_is_read_against_its_own_members_whatever_the_order() -> None:
    runs = {
        "on_policy": [run("on_policy", s, PLATEAU) for s in (0, 1)],
        "replay": [run("replay", 1, PAST_IT), run("replay", 0, PLATEAU)],
    }
    gap = envelope_reading(runs, baseline="on_policy", sweep=[])["final_gap"]["methods"]["replay"]
    assert gap["seed_ids"] == [1, 0]
    assert gap["gap_per_seed"] == pytest.approx([100 * (sum(PAST_IT[-3:]) / 3 - 0.47), 0.0])
    assert gap["verdict_per_seed"] == ["above", "level"]


def test_a_run_short_of_the_members_compute_gets_no_verdict() -> None:
    longer = [*PLATEAU, 0.47, 0.47, 0.47]  # a member that spent 1,000 where the baseline spent 700
    runs = {
        "on_policy": [run("on_policy", 0, PLATEAU)],
        "on_policy_lr2x": [run("on_policy_lr2x", 0, longer)],
        "short": [run("short", 0, PAST_IT)],  # stopped at 700, climbing
        "late": [
            RunCurves(
                Path("/nowhere/late/seed-0"), run("late", 0, PAST_IT, cost=1100).records[1:], ()
            )
        ],
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=["on_policy_lr2x"])
    gap = reading["final_gap"]
    assert gap["at_compute_per_seed"] == pytest.approx([1000.0])
    short = gap["methods"]["short"]
    assert short["read_at_per_seed"] == pytest.approx([700.0])
    assert short["gap_per_seed"][0] > 15 and short["verdict_per_seed"] == [None]
    late = gap["methods"]["late"]  # first evaluated at 1,100: nothing to read at 1,000
    assert late["gap_per_seed"] == [None] and late["median_gap"] is None
    note = next(line for line in note_lines(reading) if line.startswith("Final accuracy"))
    assert "late — (0: —)" in note and "short +" in note


def test_across_tasks_counts_the_seeds_without_a_verdict() -> None:
    rows = [
        {"final_gap": 9.0, "seed_ids": [0, 1], "final_gap_verdict_per_seed": ["above", "above"]},
        {"final_gap": 1.0, "seed_ids": [0, 1], "final_gap_verdict_per_seed": ["level", None]},
        {"ratio": 1.0},  # a summary written before the reading
    ]
    assert across(rows) == {
        "final_gap_seeds": {"above": 2, "level": 1, "below": 0},
        "final_gap_chosen_seeds": {"above": 0, "level": 0, "below": 0},  # no chosen readings
        "final_gap_seeds_without_verdict": 1,
        "final_gap_tasks_above": 1,
        "final_gap_tasks": 2,
    }
    assert across([{"ratio": 1.0}]) == {}


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
    assert "Seeds above / level / below over every task: replay 2 / 2 / 0." in text
    member = reading["methods"]["on_policy_lr2x"]["across"]["vs_tuned"]
    assert "final_gap_seeds" not in member  # a member of every task's sweep: not counted
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


def with_rows(curve: RunCurves, right: list[int], size: int, logged: int = 0) -> RunCurves:
    """`curve` over `size` problems, evaluation i right on the first `right[i]` of them; from
    evaluation `logged` on, each record carries its rows' verdicts (`CORRECT_ROWS`)."""
    records = []
    for i, (record, k) in enumerate(zip(curve.records, right, strict=True)):
        record = {**record, "eval/accuracy": k / size, "eval/size": float(size)}
        if i >= logged:
            record[CORRECT_ROWS] = "1" * k + "0" * (size - k)
        records.append(record)
    return RunCurves(curve.run_dir, tuple(records), ())


def test_rows_both_runs_answer_alike_pair_away_and_a_narrow_gap_resolves() -> None:
    # 30 problems: on-policy right on the first 14 at the end, replay on the same 14 and 4 more
    member = [10, 14, 14, 14, 14, 14, 14, 14]
    method = [10, 12, 14, 15, 16, 18, 18, 18]
    runs = {
        "on_policy": [with_rows(run("on_policy", 0, PLATEAU), member, 30)],
        "replay": [with_rows(run("replay", 0, PLATEAU), method, 30)],
        "unlogged": [with_rows(run("unlogged", 0, PLATEAU), method, 30, logged=6)],
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=[])
    gap = reading["final_gap"]["methods"]
    paired, unpaired = gap["replay"], gap["unlogged"]
    note = next(line for line in note_lines(reading) if line.startswith("Final accuracy"))
    assert "paired problem by problem on 1 of 2 seeds" in note
    assert paired["gap_per_seed"] == pytest.approx([100 * 4 / 30])  # the rows' mean difference
    assert paired["gap_per_seed"] == pytest.approx(unpaired["gap_per_seed"])
    share = 4 / 30  # d = 1 on four problems, 0 on the rest
    assert paired["error_per_seed"] == pytest.approx([100 * (share * (1 - share) / 29) ** 0.5])
    assert paired["paired_per_seed"] == [True] and paired["verdict_per_seed"] == ["above"]
    # one of its last three evaluations without rows: read as two independent accuracies
    assert unpaired["paired_per_seed"] == [False] and unpaired["verdict_per_seed"] == ["level"]
    assert unpaired["error_per_seed"] == pytest.approx(paired["unpaired_error_per_seed"])
    assert unpaired["error_per_seed"][0] > 2 * paired["error_per_seed"][0]


def test_row_scores_average_the_smoothed_window_and_refuse_mixed_splits() -> None:
    curve = with_rows(run("m", 0, PLATEAU), [10, 14, 14, 14, 14, 14, 15, 17], 30)
    scores = row_scores(curve, 7)
    assert scores is not None and scores.mean() == pytest.approx(curve.smoothed[7])
    assert scores[14] == pytest.approx(2 / 3) and scores[16] == pytest.approx(1 / 3)
    records = list(curve.records)
    records[6] = {**records[6], CORRECT_ROWS: "1" * 31}  # another split's length
    assert row_scores(RunCurves(curve.run_dir, tuple(records), ()), 7) is None
    assert row_scores(curve, 0) is not None  # the first evaluation smooths over itself
    assert paired_error(scores, scores[:-1], 30) is None
    assert paired_error(scores, scores, 1.0) is None
    assert paired_error(scores, scores, 30) == 0.0


def test_the_member_chosen_on_the_other_seeds_carries_no_luck_of_this_one() -> None:
    lucky = [0.35, 0.47, *[0.55] * 6]  # ends highest on seed 0 only
    plain = [0.35, *[0.38] * 7]
    method = [0.35, 0.47, *[0.60] * 6]
    runs = {
        "on_policy": [run("on_policy", s, PLATEAU) for s in (0, 1, 2)],
        "on_policy_lr2x": [run("on_policy_lr2x", s, lucky if s == 0 else plain) for s in (0, 1, 2)],
        "replay": [run("replay", s, method) for s in (0, 1, 2)],
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=["on_policy_lr2x"])
    gap = reading["final_gap"]
    assert gap["best_member_per_seed"] == ["on_policy_lr2x", "on_policy", "on_policy"]
    assert gap["chosen_member_per_seed"] == ["on_policy", "on_policy", "on_policy"]
    replay = gap["methods"]["replay"]
    assert replay["gap_per_seed"] == pytest.approx([5.0, 13.0, 13.0])
    assert replay["verdict_per_seed"] == ["level", "above", "above"]
    assert replay["chosen_gap_per_seed"] == pytest.approx([13.0, 13.0, 13.0])
    assert replay["chosen_verdict_per_seed"] == ["above"] * 3
    note = next(line for line in note_lines(reading) if line.startswith("Final accuracy"))
    assert "against the member chosen on the other seeds 3 / 0 / 0" in note
    alone = envelope_reading(
        {k: v[:1] for k, v in runs.items()}, baseline="on_policy", sweep=["on_policy_lr2x"]
    )["final_gap"]
    assert alone["chosen_member_per_seed"] == [None]  # one seed: nothing to choose on
    assert alone["methods"]["replay"]["chosen_verdict_per_seed"] == [None]
    summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
    summary["envelope"] = reading
    suite = suite_summary({"t": summary}, baseline="on_policy")
    assert suite["methods"]["replay"]["across"]["vs_tuned"]["final_gap_chosen_seeds"] == {
        "above": 3,
        "level": 0,
        "below": 0,
    }
    assert "tuned on pilot runs): replay 3 / 0 / 0" in suite_markdown(suite)
