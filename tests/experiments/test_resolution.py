"""Each per-seed ratio bracketed by its evaluations' resolution (issue #53): a miss by a hair on a
plateau is unresolved, a run that needs twice the compute on a steady climb is worse, and a
suite says which seeds are worse across its tasks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llm_replay.evaluation import distinct_problems
from llm_replay.experiments.across_tasks import suite_markdown, suite_summary
from llm_replay.experiments.analysis import RunCurves, compare_methods
from llm_replay.experiments.envelope import envelope_reading, note_lines
from llm_replay.experiments.resolution import (
    accuracy_error,
    bracket,
    problems_sentence,
    reach_window,
    verdict,
)
from llm_replay.tasks import Problem
from tests.conftest import ROOT

PLATEAU = [0.35, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47]
CLIMB = [0.30 + 0.02 * i for i in range(21)]  # 0.30 to 0.70, steadily


def run(name: str, seed: int, accuracies: list[float], cost: float, size: int) -> RunCurves:
    records = tuple(
        {
            "kind": "eval",
            "iteration": i,
            "steps": i,
            "eval/accuracy": a,
            "eval/size": float(size),
            "compute/seconds": float(i),
            "compute/rollouts_generated": 10 * i,
            "compute/tokens_generated": i * cost / 5,
            "compute/completion_tokens_trained": 0.0,
        }
        for i, a in enumerate(accuracies)
    )
    return RunCurves(Path("/nowhere") / name / f"seed-{seed}", records, ())


def test_the_error_is_the_smoothed_accuracys_standard_error() -> None:
    assert accuracy_error(0.5, 500) == pytest.approx(math.sqrt(0.25 / 1500))
    assert accuracy_error(1.0, 500) == 0.0
    with pytest.raises(ValueError, match="problems"):
        accuracy_error(0.5, 0)


def test_a_window_reaches_back_one_evaluation_and_forward_by_the_error() -> None:
    climb = run("m", 0, CLIMB, 100, 500)
    level = 0.50  # index 10 raw; the trailing mean of three lags one evaluation: index 11
    early, late = reach_window(climb, level, 0.02, "mu_5")
    assert early == pytest.approx(900.0)  # first smoothed >= 0.48 at index 10: credit from 9
    assert late == pytest.approx(1200.0)  # first smoothed >= 0.52 at index 12
    assert reach_window(climb, 0.9, 0.01, "mu_5") == (math.inf, math.inf)


def test_a_bracket_and_its_verdict() -> None:
    assert bracket((200.0, 400.0), (100.0, 150.0)) == pytest.approx((200 / 150, 4.0))
    assert verdict(*bracket((200.0, 400.0), (100.0, 150.0))) == "worse"
    assert verdict(*bracket((0.0, 60.0), (100.0, 150.0))) == "better"
    assert verdict(*bracket((50.0, 300.0), (100.0, 150.0))) == "unresolved"
    assert bracket((math.inf, math.inf), (100.0, 150.0))[0] == math.inf  # never: worse
    assert bracket((50.0, 300.0), (100.0, math.inf))[0] == 0.0  # the envelope never credibly
    assert bracket((50.0, 300.0), (0.0, 100.0))[1] == math.inf


def test_a_hair_under_a_plateau_doubles_the_ratio_and_is_unresolved() -> None:
    hair = [0.35, 0.469, 0.469, 0.469, 0.47, 0.47, 0.47, 0.47]  # one problem in 1,000 short
    runs = {
        "on_policy": [run("on_policy", s, PLATEAU, 100, 500) for s in (0, 1, 2)],
        "replay": [run("replay", s, hair, 100, 500) for s in (0, 1, 2)],
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=[])
    raw = reading["methods"]["replay"]["baseline_final"]["ratio_per_seed"]["mu_5"]
    assert raw == pytest.approx([6 / 3] * 3)  # reached three evaluations late, on a hair
    resolved = reading["resolution"]["methods"]["replay"]
    assert resolved["verdict_per_seed"]["mu_5"] == ["unresolved"] * 3
    assert resolved["worse_seeds"]["mu_5"] == 0
    assert any("bracketed" in line and "unresolved" in line for line in note_lines(reading))


def test_twice_the_compute_on_a_steady_climb_is_worse_and_twice_the_pace_better() -> None:
    runs = {
        "on_policy": [run("on_policy", s, CLIMB, 100, 5000) for s in (0, 1)],
        "slow": [run("slow", s, CLIMB, 200, 5000) for s in (0, 1)],
        "fast": [
            run("fast", s, [min(0.3 + 0.04 * i, 0.9) for i in range(21)], 100, 5000) for s in (0, 1)
        ],
    }
    resolved = envelope_reading(runs, baseline="on_policy", sweep=[])["resolution"]["methods"]
    assert resolved["slow"]["verdict_per_seed"]["mu_5"] == ["worse", "worse"]
    assert resolved["fast"]["verdict_per_seed"]["mu_5"] == ["better", "better"]
    assert resolved["on_policy"]["verdict_per_seed"]["mu_5"] == ["unresolved"] * 2
    low, high = resolved["slow"]["bracket_per_seed"]["mu_5"][0]
    assert 1.0 < low < 2.0 and high is None  # slow never gets past its own final


def test_without_eval_size_only_the_cadence_brackets() -> None:
    bare = [
        RunCurves(
            c.run_dir,
            tuple({k: v for k, v in r.items() if k != "eval/size"} for r in c.records),
            (),
        )
        for c in (run("on_policy", 0, CLIMB, 100, 500),)
    ]
    slow = [run("slow", 0, CLIMB, 200, 500)]
    reading = envelope_reading({"on_policy": bare, "slow": slow}, baseline="on_policy", sweep=[])
    assert reading["resolution"]["error_per_seed"] == [0.0]
    assert reading["resolution"]["methods"]["slow"]["verdict_per_seed"]["mu_5"] == ["worse"]


def test_a_suite_names_the_seeds_resolved_worse() -> None:
    summaries = {}
    for task, slow_cost in (("steady", 200), ("plateau", 100)):
        curve = CLIMB if task == "steady" else PLATEAU
        runs = {
            "on_policy": [run("on_policy", s, curve, 100, 5000) for s in (0, 1)],
            "replay": [run("replay", s, curve, slow_cost, 5000) for s in (0, 1)],
        }
        summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
        summary["envelope"] = envelope_reading(runs, baseline="on_policy", sweep=[])
        summaries[task] = summary
    reading = suite_summary(summaries, baseline="on_policy")
    across = reading["methods"]["replay"]["across"]["vs_tuned"]
    assert across["resolved_worse"] == ["steady/0", "steady/1"]
    row = reading["methods"]["replay"]["tasks"]["steady"]["vs_tuned"]
    assert row["verdict_per_seed"] == ["worse", "worse"]
    text = suite_markdown(reading)
    assert "| replay | steady | 0 / 0 / 2 |" in text
    assert "Effective eval problems: steady 5000, plateau 5000." in text


def test_a_task_with_few_effective_problems_is_named() -> None:
    reading = {
        "tasks": {
            "gcd": {"envelope": {"eval_problems": [275.0, 275.0]}},
            "lcm": {"envelope": {"eval_problems": [27.5, 27.5]}},
            "old": {"envelope": {"eval_problems": None}},
        }
    }
    text = problems_sentence(reading)
    assert text.startswith("Effective eval problems: gcd 275, lcm 28 (lcm: under 100")


def test_distinct_problems_counts_a_repeated_prompt_by_its_weight() -> None:
    assert distinct_problems([Problem(p, "1") for p in "abcd"]) == pytest.approx(4.0)
    assert distinct_problems([Problem(p, "1") for p in "aab"]) == pytest.approx(9 / 5)
    with pytest.raises(ValueError, match="problems"):
        distinct_problems([])


def test_the_error_follows_the_distinct_problems_not_the_rows() -> None:
    """500 rows of 27 effective problems (the suite's lcm) move as 27 problems do."""

    def with_distinct(c: RunCurves, distinct: float) -> RunCurves:
        records = tuple({**r, "eval/distinct": distinct} for r in c.records)
        return RunCurves(c.run_dir, records, ())

    rows = {"on_policy": [run("on_policy", 0, CLIMB, 100, 500)]}
    assert envelope_reading(rows, baseline="on_policy", sweep=[])["resolution"][
        "problems_per_seed"
    ] == [500.0]
    given = envelope_reading(rows, baseline="on_policy", sweep=[], distinct=27.0)["resolution"]
    assert given["problems_per_seed"] == [27.0]
    assert given["error_per_seed"][0] == pytest.approx(accuracy_error(0.68, 27.0))
    logged = {"on_policy": [with_distinct(rows["on_policy"][0], 40.0)]}
    own = envelope_reading(logged, baseline="on_policy", sweep=[], distinct=27.0)["resolution"]
    assert own["problems_per_seed"] == [40.0]  # the log's own count wins


def test_report_rebuilds_the_split_of_logs_that_predate_eval_distinct(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from llm_replay.experiments import compare
    from llm_replay.runtime import task_builder
    from llm_replay.tasks import TaskError

    monkeypatch.chdir(ROOT)
    experiment = compare.load_experiment("configs/experiment_chain_sum_sweep.yaml")
    old = [run("on_policy", 0, CLIMB, 100, 500)]
    assert compare.split_distinct(experiment, old) == pytest.approx(177.557, abs=0.01)
    logged = [
        RunCurves(old[0].run_dir, tuple({**r, "eval/distinct": 50.0} for r in old[0].records), ())
    ]
    assert compare.split_distinct(experiment, logged) is None  # the log says it
    mixed = [*logged, old[0]]  # seeds run before eval/distinct beside seeds run after
    assert compare.split_distinct(experiment, mixed) == pytest.approx(177.557, abs=0.01)

    def unbuildable(*args: object, **kwargs: object) -> None:
        raise TaskError("task.path = 'gone.jsonl': no such file")

    monkeypatch.setattr(task_builder, "build_task", unbuildable)
    assert compare.split_distinct(experiment, old) is None
    assert "eval split not rebuilt" in caplog.text and "gone.jsonl" in caplog.text
