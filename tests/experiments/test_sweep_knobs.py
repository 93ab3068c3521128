"""What a baseline sweep moves: read from the members' run settings, named by the playbook's knobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_replay.config import load_config
from llm_replay.experiments.compare import protocol_of
from llm_replay.experiments.sweep_knobs import coverage_line, member_changes, sweep_coverage

ROOT = Path(__file__).resolve().parents[2]


def _member(*overrides: str) -> dict[str, Any]:
    return protocol_of(load_config("on_policy", ["train.seed=3", *overrides]))


def test_a_member_reads_the_settings_it_changes_and_not_how_it_runs() -> None:
    base = _member()
    steps2 = _member("train.batch_size=128", "train.micro_batch_size=64", "train.seed=4")
    assert member_changes(base, steps2) == {"train.batch_size": [256, 128]}
    group4 = _member("generation.group_size=4", "generation.prompts_per_step=64")
    assert member_changes(base, group4) == {
        "generation.group_size": [8, 4],
        "generation.prompts_per_step": [32, 64],
    }


def test_a_four_member_sweep_names_the_knob_it_leaves() -> None:
    sweep = {
        "on_policy": _member(),
        "on_policy_steps2": _member("train.batch_size=128", "train.micro_batch_size=128"),
        "on_policy_lr2x": _member("optim.lr=1e-4"),
        "on_policy_lr_half": _member("optim.lr=2.5e-5"),
    }
    coverage = sweep_coverage(sweep, "on_policy")
    assert coverage["unswept"] == ["generation.group_size"]
    assert coverage["one_way"] == ["train.batch_size"]
    assert coverage["swept"]["optim.lr"] == [[0.5, "on_policy_lr_half"], [2.0, "on_policy_lr2x"]]
    line = coverage_line(coverage)
    assert "learning rate ×0.5 (on_policy_lr_half), ×2 (on_policy_lr2x)" in line
    assert "gradient steps a round ×2 (on_policy_steps2, train.batch_size ×0.5)" in line
    assert "Not swept: group size." in line
    assert "Moved one way only: gradient steps a round." in line


def test_a_full_sweep_leaves_nothing_and_a_companion_setting_is_not_a_second_knob() -> None:
    sweep = {
        "on_policy": _member(),
        "lr_half": _member("optim.lr=2.5e-5"),
        "lr2x": _member("optim.lr=1e-4"),
        "group4": _member("generation.group_size=4", "generation.prompts_per_step=64"),
        "group16": _member("generation.group_size=16", "generation.prompts_per_step=16"),
        "steps2": _member("train.batch_size=128", "train.micro_batch_size=128"),
        "steps_half": _member("train.batch_size=512", "train.micro_batch_size=256"),
    }
    coverage = sweep_coverage(sweep, "on_policy")
    assert coverage["unswept"] == [] and coverage["one_way"] == []
    line = coverage_line(coverage)
    assert "Not swept" not in line and "one way" not in line and "beyond" not in line
    assert "group size ×0.5 (group4), ×2 (group16)" in line


def test_a_member_that_moves_something_else_is_said_to() -> None:
    sweep = {"on_policy": _member(), "hot": _member("generation.temperature=1.2")}
    line = coverage_line(sweep_coverage(sweep, "on_policy"))
    assert line.startswith("The sweep moves none of the playbook's knobs; and beyond them ")
    assert "generation.temperature" in line
    assert "Not swept: learning rate, gradient steps a round, group size." in line


def test_a_sweep_without_its_baseline_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="baseline 'on_policy'"):
        sweep_coverage({"lr2x": _member("optim.lr=1e-4")}, "on_policy")


# --- `baseline_sweep: playbook` ---------------------------------------------------------------


def test_the_playbook_is_the_suites_six_member_sweep_and_reuses_its_archived_runs(
    tmp_path: Path,
) -> None:
    from llm_replay.experiments.compare import run_config
    from llm_replay.experiments.suite import load_suite

    shipped = ROOT / "configs" / "experiment_suite_group_sweep_5seeds.yaml"
    data = yaml.safe_load(shipped.read_text())
    data["methods"] = {k: v for k, v in data["methods"].items() if k in ("on_policy", "auto_carry")}
    data["baseline_sweep"] = "playbook"
    short = tmp_path / "sweep.yaml"
    short.write_text(yaml.safe_dump(data))
    full, ours = load_suite(shipped).tasks["gcd"], load_suite(short).tasks["gcd"]
    assert ours.baseline_sweep == full.baseline_sweep  # the same six, in the same order
    for name in full.baseline_sweep:
        theirs, mine = full.method(name), ours.method(name)
        assert protocol_of(run_config(ours, mine, 3)) == protocol_of(run_config(full, theirs, 3))


def test_playbook_among_names_keeps_a_declared_member_and_a_quick_run_leaves_the_rest(
    tmp_path: Path,
) -> None:
    from llm_replay.experiments.experiment_file import load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(
        """
seeds: [0, 1]
budget: 600
eval_every: 100
baseline: on_policy
set: [optim.lr=2e-5]
methods:
  on_policy:        {config: on_policy, set: [generation.group_size=6, generation.prompts_per_step=5]}
  on_policy_lr2x:   {config: on_policy, set: [optim.lr=7e-5]}
  replay:           {config: uniform}
baseline_sweep: [playbook, on_policy_lr2x]
quick:
  methods: [on_policy, replay]
"""
    )
    experiment = load_experiment(path)
    assert experiment.baseline_sweep == (
        "on_policy",
        "on_policy_steps2",
        "on_policy_lr2x",
        "on_policy_lr_half",
        "on_policy_group3",
    )  # group 6 halves to 3; 5 prompts do not halve, so no group 12
    assert experiment.method("on_policy_lr2x").overrides == ("optim.lr=7e-5",)  # the file's own
    assert experiment.method("on_policy_lr_half").overrides[-1] == "optim.lr=1e-05"
    assert experiment.method("on_policy_group3").overrides[-2:] == (
        "generation.group_size=3",
        "generation.prompts_per_step=10",
    )
    steps2 = experiment.method("on_policy_steps2").overrides[-2:]
    assert steps2 == ("train.batch_size=128", "train.micro_batch_size=128")
    assert load_experiment(path, quick=True).baseline_sweep == ("on_policy",)


def test_a_move_the_baselines_settings_refuse_is_left_out_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from llm_replay.experiments.experiment_file import load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(
        """
budget: 600
eval_every: 100
methods:
  on_policy: {config: on_policy, set: [generation.adaptive.enabled=true, generation.adaptive.stage_size=8]}
baseline_sweep: playbook
"""
    )
    with caplog.at_level("WARNING", logger="llm_replay.experiments.experiment_file"):
        experiment = load_experiment(path)
    assert "on_policy_group4" not in experiment.baseline_sweep  # stages of 8 fill no group of 4
    assert "on_policy_group16" in experiment.baseline_sweep
    assert "playbook: on_policy_group4 left out" in caplog.text and "stage_size" in caplog.text


def test_a_misspelt_playbook_is_refused_with_the_word(tmp_path: Path) -> None:
    from llm_replay.config import ConfigError
    from llm_replay.experiments.experiment_file import load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(
        "budget: 600\neval_every: 100\nmethods:\n  on_policy: {config: on_policy}\n"
        "baseline_sweep: playbok\n"
    )
    with pytest.raises(ConfigError, match="did you mean 'playbook'"):
        load_experiment(path)
