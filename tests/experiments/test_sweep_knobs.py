"""What a baseline sweep moves: read from the members' run settings, named by the playbook's knobs."""

from __future__ import annotations

from typing import Any

import pytest

from llm_replay.config import load_config
from llm_replay.experiments.compare import protocol_of
from llm_replay.experiments.sweep_knobs import coverage_line, member_changes, sweep_coverage


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
