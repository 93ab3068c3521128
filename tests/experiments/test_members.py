"""A mixture's members read one by one, on synthetic logs whose member curves are chosen by hand:
the member view, each member's ratio and margin, where a member starves, the Markdown and the
member panels through `report`."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.experiments.analysis import RunCurves
from llm_replay.experiments.members import (
    member_names,
    member_view,
    members_markdown,
    members_reading,
    plot_members,
)
from llm_replay.metrics import MetricsLogger
from llm_replay.metrics.logging import CORRECT_ROWS

RISE = [0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
FLAT = [0.2] * 10
FAST = [0.2, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]


def mixture_run(path: Path, members: dict[str, list[float]], train_tokens: int = 100) -> RunCurves:
    """A run evaluating each member (overall: their mean); every eval costs the same compute."""
    logger = MetricsLogger(path)
    for i in range(len(next(iter(members.values())))):
        record = {
            "kind": "eval", "iteration": i, "steps": i, "compute/seconds": i * 1.0,
            "compute/rollouts_generated": i * 10, "compute/tokens_generated": i * 100,
            "compute/completion_tokens_trained": i * train_tokens,
        }  # fmt: skip
        for name, curve in members.items():
            record[f"eval/{name}/accuracy"] = curve[i]
            record[f"eval/{name}/pass@8"] = min(1.0, curve[i] + 0.2)
            record[f"eval/{name}/entropy"] = 0.5
        record["eval/accuracy"] = sum(c[i] for c in members.values()) / len(members)
        record["eval/pass@8"] = 0.9
        record["eval/entropy"] = 0.5
        record[CORRECT_ROWS] = "01" * 5  # the whole split's rows, not one member's
        logger.log(record)
    logger.close()
    return RunCurves.load(path)


def runs(tmp_path: Path) -> dict[str, list[RunCurves]]:
    """Three seeds each: on-policy rises on both members; `easy_only` is fast on a and starves b;
    `both` is fast on both."""
    out: dict[str, list[RunCurves]] = {}
    for name, members in {
        "on_policy": {"a": RISE, "b": RISE},
        "easy_only": {"a": FAST, "b": FLAT},
        "both": {"a": FAST, "b": FAST},
    }.items():
        out[name] = [mixture_run(tmp_path / name / f"seed-{s}", members) for s in range(3)]
    return out


def test_a_member_view_has_the_members_readings_as_its_own(tmp_path: Path) -> None:
    run = mixture_run(tmp_path / "r", {"a": FAST, "b": FLAT})
    assert member_names([run]) == ["a", "b"]
    view = member_view(run, "b")
    assert list(view.accuracy) == FLAT
    assert view.final["eval/pass@8"] == pytest.approx(0.4)
    assert not any(k.startswith("eval/a/") for k in view.records[0])
    assert CORRECT_ROWS in run.records[0] and CORRECT_ROWS not in view.records[0]
    assert list(view.compute("mu_5")) == list(run.compute("mu_5"))
    with pytest.raises(ValueError, match="no evaluation of member 'c'"):
        member_view(run, "c")


def test_each_member_is_read_as_a_task_and_the_starved_one_is_found(tmp_path: Path) -> None:
    reading = members_reading(runs(tmp_path), "on_policy")
    assert reading is not None and set(reading["tasks"]) == {"a", "b"}
    easy = reading["methods"]["easy_only"]["tasks"]
    # smoothed over 3 evals, on-policy first reaches its final 0.6 at eval 6, FAST at eval 3
    assert easy["a"]["ratio"] == pytest.approx(3 / 6)
    assert easy["b"]["ratio"] is None and easy["b"]["never_reached_seeds"] == 3
    assert easy["a"]["starving"] is None
    starved = easy["b"]["starving"]
    assert starved is not None and starved["lowest_points"] == pytest.approx(-40.0)
    assert starved["from_budget_share"] < 0.35
    both = reading["methods"]["both"]
    assert both["across"]["worst_ratio"] == pytest.approx(3 / 6)
    assert all(r["starving"] is None for r in both["tasks"].values())
    text = members_markdown(reading)
    assert "| easy_only | b |" in text and "| both | a | never |" in text


def test_runs_without_members_have_no_member_reading(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path / "seed-0")
    logger.log({"kind": "eval", "iteration": 0, "steps": 0, "eval/accuracy": 0.1})
    logger.close()
    assert (
        members_reading({"on_policy": [RunCurves.load(tmp_path / "seed-0")]}, "on_policy") is None
    )


def test_the_member_panels_are_drawn(tmp_path: Path) -> None:
    paths = plot_members(runs(tmp_path), "on_policy", "mixture", tmp_path)
    assert [p.name for p in paths] == ["members_accuracy_vs_compute.png"]
    assert paths[0].stat().st_size > 10_000


def test_a_tiny_mixture_experiment_reports_each_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`compare` then `report --markdown` on a mixture: the members' reading in summary.json,
    the Markdown and a panel per member."""
    import json

    from llm_replay.cli import main
    from tests.experiments.test_compare import ROOT, TINY_SET

    monkeypatch.chdir(ROOT)
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"""
name: tiny_mixture
out: {tmp_path / "out"}
seeds: [0]
budget: 1.0
eval_every: 0.5
baseline: on_policy
set: {TINY_SET}
  - model.path=builtin:tiny-mixture
  - task.kind=mixture
  - "task.members={{gcd: {{weight: 1}}, lcm: {{weight: 1}}}}"
  - generation.max_new_tokens=6
methods:
  on_policy:     {{config: on_policy}}
  auto_balanced: {{config: auto, set: [replay.capacity=64, replay.tasks.balance=true]}}
"""
    )
    assert main(["compare", str(path), "--quiet"]) == 0
    out = tmp_path / "out" / "full"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["members"]["tasks"]) == {"gcd", "lcm"}
    assert set(summary["members"]["methods"]["auto_balanced"]["tasks"]) == {"gcd", "lcm"}
    assert (out / "members_accuracy_vs_compute.png").stat().st_size > 10_000
    capsys.readouterr()
    assert main(["report", str(path), "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "Per member of the mixture" in text and "| auto_balanced | lcm |" in text
