"""Suites: one experiment per built-in task, compare and report across tasks (issue #38)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from llm_replay.cli import main
from llm_replay.config import ConfigError, load_config
from llm_replay.experiments.across_tasks import across_tasks, suite_markdown, suite_summary
from llm_replay.experiments.compare import run_config
from llm_replay.experiments.suite import load_suite, run_suite
from llm_replay.experiments.suite_stats import median_across_uncertainty
from llm_replay.tasks.builtin import BUILTIN_TASKS, builtin_overrides
from tests.experiments.test_compare import TINY_SET

ROOT = Path(__file__).resolve().parents[2]


def write_suite(tmp_path: Path, tasks: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(
        f"""
name: tiny_suite
out: {tmp_path / "out"}
archive: {tmp_path / "archive"}
seeds: [0]
budget: 1.5
eval_every: 0.5
baseline: on_policy
set: {TINY_SET}
methods:
  on_policy: {{config: on_policy}}
  uniform:   {{config: uniform, set: [replay.capacity=64]}}
tasks:
{tasks}
"""
    )
    return path


def test_every_built_in_task_points_a_preset_at_its_task_and_model() -> None:
    for name, spec in BUILTIN_TASKS.items():
        config = load_config("on_policy", builtin_overrides(name))
        assert config.task.dataset == spec["dataset"] and config.task.params == spec["params"]
        assert config.task.prompt_template == spec["prompt_template"]
        assert config.model.path == "builtin:tiny-" + name.replace("_", "-")
    assert load_config("on_policy", builtin_overrides("chain_sum")) == load_config("on_policy")


def test_a_suite_is_one_experiment_a_task_with_the_tasks_own_settings(tmp_path: Path) -> None:
    path = write_suite(
        tmp_path,
        "  chain_sum:\n  spell_backward: {budget: 3, eval_every: 1, set: [task.reward=binary]}",
    )
    suite = load_suite(path)
    assert list(suite.tasks) == ["chain_sum", "spell_backward"]
    spell = suite.tasks["spell_backward"]
    assert (spell.budget, spell.eval_every) == (3.0, 1.0)
    assert spell.out == tmp_path / "out" / "spell_backward" / "full"
    assert spell.archive == tmp_path / "archive" / "spell_backward"
    config = run_config(spell, spell.method("uniform"), 0)
    assert config.task.dataset == "spell_backward" and config.task.reward == "binary"
    assert config.replay.settings.capacity == 64 and config.task.train_size == 300
    assert run_config(suite.tasks["chain_sum"], spell.method("uniform"), 0).task.reward == "score"


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ("  sudoku:", r"tasks\.sudoku: not a built-in task"),
        ("  chian_sum:", r"tasks\.chian_sum: not a built-in task.*; did you mean 'chain_sum'\?"),
        (
            "  chain_sum: {budgte: 3}",
            r"tasks\.chain_sum: a mapping of.*; did you mean 'tasks\.chain_sum\.budget'\?",
        ),
        ("  chain_sum: {budget: -1}", r"tasks\.chain_sum: budget = -1"),
        ("  []", "tasks: a mapping"),
    ],
)
def test_bad_suites_are_named(tmp_path: Path, tasks: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_suite(write_suite(tmp_path, tasks))


def row(ratio: float | None, margin: float, entropy: float, seeds: int = 3) -> dict:
    return {
        "seeds": seeds,
        "compute_to_target_ratio": {"mu_5": ratio},
        "compute_to_target_ratio_per_seed": {"mu_5": [ratio] * seeds},
        "never_reached_seeds": {"mu_5": 0 if ratio is not None else seeds},
        "worst_margin_mu_5": margin,
        "final_accuracy": {"median": 0.5, "ci95": [0.45, 0.55]},
        "entropy": {"median": entropy, "ci95": [entropy - 0.05, entropy + 0.05]},
        "pass@8": {"median": 0.6, "ci95": [0.55, 0.65]},
    }


def test_the_reading_across_tasks_by_hand() -> None:
    summaries = {
        "a": {
            "target_accuracy": 0.5,
            "methods": {"base": row(1.0, 0.0, 0.6), "m": row(0.4, 1.5, 0.6)},
        },
        "b": {
            "target_accuracy": 0.4,
            "methods": {"base": row(1.0, 0.0, 0.6), "m": row(0.8, -2.0, 0.5)},
        },
        "c": {
            "target_accuracy": 0.3,
            "methods": {"base": row(1.0, 0.0, 0.6), "m": row(None, 0.5, 0.7)},
        },
    }
    reading = suite_summary(summaries, "base")
    across = reading["methods"]["m"]["across"]
    assert across["median_ratio"] == 0.8 and math.isinf(across["worst_ratio"])
    assert across["worst_margin"] == -2.0
    assert across["entropy_kept"] == 2  # b's 0.5 is below base's interval [0.55, 0.65]
    assert reading["methods"]["m"]["tasks"]["b"]["entropy_kept"] is False
    assert across_tasks({})["median_ratio"] is None
    text = suite_markdown(reading)
    assert across["median_ratio_ci95"] == [0.8, 0.8]  # every seed alike: nothing moves it
    assert across["median_ratio_within_goal"] == 0.0
    assert "| m | 3 (3) | 0.80× [0.80–0.80×] | 0% | not reached | -2.0 | 2/3 | 3/3 (0) |" in text
    # c's baseline ends 1 point above where it started: no gain to save, read for harm only
    gains = suite_summary(summaries, "base", {"a": 0.3, "b": 0.2, "c": 0.29})
    across = gains["methods"]["m"]["across"]
    assert (across["gain_tasks"], across["worst_ratio"]) == (2, 0.8)
    assert across["median_ratio"] == pytest.approx(0.6)
    assert across["median_ratio_ci95"] == pytest.approx([0.6, 0.6])
    assert across["worst_margin"] == -2.0 and gains["tasks"]["c"]["no_gain"]
    assert gains["tasks"]["a"]["baseline_gain_points"] == pytest.approx(20.0)
    assert "| m | c | 3 | no gain to save |" in suite_markdown(gains)
    assert "Guard (" not in text  # no method ran with the guard
    guard = {"per_seed": [{"cosine": 0.1, "error": 0.02, "fell_back_at": None}], "fell_back": 0}
    reading["guard"] = {"b": {"m": guard}}
    assert "b: Guard (`replay.anneal.guard`), `m`: fell back to on-policy on 0 of 1 seeds" in (
        suite_markdown(reading)
    )


def test_the_median_across_tasks_resampled_over_seeds_by_hand() -> None:
    # one task, seeds [0.2, 0.8]: a resample's median is 0.2 (both draws 0.2, 1/4), 0.5 (one of
    # each, 1/2) or 0.8 (1/4), so 3/4 of resamples are at or under 0.5× and the interval spans both
    one = median_across_uncertainty([[0.2, 0.8]], seed=1)
    assert one is not None and one["ci95"] == pytest.approx([0.2, 0.8])
    assert one["within_goal"] == pytest.approx(0.75, abs=0.02)  # 9999 resamples: SE 0.004
    # beside a task at 0.3× on every seed: the across-task median is the mean of the two tasks'
    # medians, (0.3 + {0.2, 0.5, 0.8}) / 2 = 0.25, 0.4 or 0.55, at or under 0.5× in 3/4
    two = median_across_uncertainty([[0.3, 0.3, 0.3], [0.2, 0.8]], seed=2)
    assert two is not None and two["ci95"] == pytest.approx([0.25, 0.55])
    assert two["within_goal"] == pytest.approx(0.75, abs=0.02)
    # "never reached" is +inf: a task never reached on every seed keeps the median infinite
    never = median_across_uncertainty([[0.4, 0.4], [None, None]])
    assert never is not None and never["ci95"] == [None, None] and never["within_goal"] == 0.0
    # a task reached on one seed in three: a resample's median is finite when two or three of
    # its three draws are the reached seed, 3·(1/3)²·(2/3) + (1/3)³ = 7/27
    third = median_across_uncertainty([[0.1, None, None]], goal=0.5)
    assert third is not None and third["within_goal"] == pytest.approx(7 / 27, abs=0.02)
    assert median_across_uncertainty([[0.4], [0.6]]) is None  # one seed a task: no spread
    assert median_across_uncertainty([]) is None
    with pytest.raises(ValueError, match="per_seed"):
        median_across_uncertainty([[0.4, math.nan]])


def test_the_medians_interval_reads_right_in_every_case() -> None:
    def line(across: dict) -> str:
        base = {"tasks": 2, "gain_tasks": 2, "median_ratio": 0.5, "worst_ratio": 0.9}
        base |= {"worst_margin": 0.0, "entropy_kept": 2, "pass_kept": 2}
        reading = {
            "baseline": "b",
            "tasks": {},
            "methods": {"m": {"tasks": {}, "across": base | across}},
        }
        return next(x for x in suite_markdown(reading).splitlines() if x.startswith("| m |"))

    finite = line({"median_ratio_ci95": [0.28, 0.72], "median_ratio_within_goal": 0.29})
    assert "| 0.50× [0.28–0.72×] | 29% |" in finite
    assert finite.endswith("| 2/2 | 2/2 (0) |")  # pass@8 kept on both tasks, raised on none
    open_above = line({"median_ratio_ci95": [0.28, None], "median_ratio_within_goal": 0.996})
    assert "| 0.50× [0.28×–not reached] | >99% |" in open_above
    never = line({"median_ratio_ci95": [None, None], "median_ratio_within_goal": 0.004})
    assert "| 0.50× [not reached] | <1% |" in never
    assert "| 0.50× | — |" in line({})  # a summary without the bootstrap
    # rows from before per-seed ratios were kept count with their median, held fixed
    rows = {
        "a": {"ratio": 0.3, "worst_margin": 0.0, "entropy_kept": True, "pass_kept": True},
        "b": {
            "ratio": 0.9,
            "ratio_per_seed": [0.2, 0.9, 2.0],
            "worst_margin": 0.0,
            "entropy_kept": True,
            "pass_kept": True,
        },
    }
    across = across_tasks(rows)
    assert across["median_ratio"] == pytest.approx(0.6) and across["pass_raised"] == 0
    low, high = across["median_ratio_ci95"]
    assert low == pytest.approx((0.3 + 0.2) / 2) and high == pytest.approx((0.3 + 2.0) / 2)


def test_compare_and_report_a_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_suite(tmp_path, "  chain_sum:\n  spell_backward: {set: [task.reward=binary]}")
    run_suite(load_suite(path), progress=False, part=(2, 2))  # half the runs, across both tasks
    done = sorted(
        p.parent.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("summary.json")
    )
    assert [str(d) for d in done] == [
        "chain_sum/full/uniform/seed-0",
        "spell_backward/full/uniform/seed-0",
    ]
    with pytest.raises(ConfigError, match=r"tasks = \['gcd'\]: not in the suite"):
        run_suite(load_suite(path), progress=False, tasks=["gcd"])
    assert main(["compare", str(path), "--quiet", "--tasks", ","]) == 2  # names no task
    assert main(["compare", str(path), "--quiet", "--tasks", "chain_sum"]) == 0  # one task's rest
    assert (tmp_path / "out" / "chain_sum" / "full" / "on_policy" / "seed-0").is_dir()
    assert not (tmp_path / "out" / "spell_backward" / "full" / "on_policy").exists()
    assert main(["compare", str(path), "--quiet"]) == 0  # the other half; the first is skipped
    printed = capsys.readouterr().out
    assert "| uniform | 2 (" in printed
    reading = json.loads((tmp_path / "out" / "suite_summary.json").read_text())
    assert set(reading["methods"]["uniform"]["tasks"]) == {"chain_sum", "spell_backward"}
    assert (tmp_path / "out" / "suite_accuracy_vs_compute.png").stat().st_size > 10_000
    for task in ("chain_sum", "spell_backward"):
        assert (tmp_path / "archive" / task / "on_policy" / "seed-0").is_dir()
        assert (tmp_path / "out" / task / "full" / "summary.json").is_file()
    assert main(["report", str(path), "--markdown", "--baseline", "uniform"]) == 0
    assert "| on_policy | 2 (" in capsys.readouterr().out
    assert (tmp_path / "out" / "against_uniform" / "suite_summary.json").is_file()


def test_a_report_reads_the_baseline_against_itself_with_four_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_suite(tmp_path, "  chain_sum:")
    path.write_text(path.read_text().replace("seeds: [0]", "seeds: [0, 1, 2, 3]"))
    assert main(["compare", str(path), "--quiet"]) == 0
    floor = json.loads((tmp_path / "out" / "suite_summary.json").read_text())["noise_floor"]
    chain = floor["tasks"]["chain_sum"]
    assert (chain["runs"], chain["splits"], chain["methods"]["uniform"]["splits"]) == (4, 4, 4)
    assert set(floor["methods_any_task_fails"]) == {"uniform"}
    printed = capsys.readouterr().out
    assert "| chain_sum | self | 4 |" in printed and "| chain_sum | uniform | 4 |" in printed
    assert (tmp_path / "out" / "suite_noise_floor.png").stat().st_size > 10_000


def test_every_built_in_task_ships_the_model_built_from_its_own_spec() -> None:
    assets = ROOT / "src" / "llm_replay" / "assets"
    for name, spec in BUILTIN_TASKS.items():
        build = json.loads((assets / ("tiny-" + name.replace("_", "-")) / "build.json").read_text())
        assert build["task"] == spec, name


def test_every_tasks_rows_are_checked_before_the_first_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row that only the second task's settings break used to be found after the first task's
    runs had trained; a mistyped --tasks name gets the nearest one."""
    monkeypatch.chdir(ROOT)
    suite = load_suite(
        write_suite(tmp_path, "  chain_sum:\n  spell_backward: {set: [replay.capacty=3]}")
    )
    with pytest.raises(
        ConfigError, match=r"tasks\.spell_backward: methods\.on_policy: unknown key"
    ):
        run_suite(suite, progress=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match=r"tasks = \['chain_summ'\]: .*did you mean 'chain_sum'"):
        run_suite(suite, progress=False, tasks=["chain_summ"])


def test_pass_at_k_is_raised_only_above_the_baselines_whole_interval() -> None:
    from llm_replay.experiments.suite_stats import kept, raised

    base = {"median": 0.5, "ci95": [0.45, 0.55]}
    assert raised({"median": 0.56}, base) and kept({"median": 0.56}, base)
    assert not raised({"median": 0.55}, base) and kept({"median": 0.5}, base)
    assert raised({"median": 0.51}, {"median": 0.5}) is True  # one seed: above its value
    assert raised({"median": math.nan}, base) is None
