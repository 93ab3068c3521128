"""Every config field, method knob and loss knob carries its help, and it reaches the user."""

from __future__ import annotations

import pytest

from llm_replay.algorithms.losses import describe_losses
from llm_replay.cli import main
from llm_replay.config import ConfigError, config_from_dict
from llm_replay.config.describe import config_fields
from llm_replay.methods import describe


def test_every_config_field_has_help() -> None:
    fields = config_fields()
    assert len(fields) > 80  # every section walked, nested ones too (generation.skip.*)
    assert {"generation.skip.retest", "workers.table_fsync", "reward_model.refresh_from"} <= {
        f.name for f in fields
    }
    missing = [f.name for f in fields if not f.help.strip()]
    assert missing == []


def test_every_method_option_and_loss_knob_has_help() -> None:
    entries = [*describe(), *describe_losses()]
    missing = [f"{e['name']}.{k['name']}" for e in entries for k in e["knobs"] if not k["help"]]
    assert missing == []


def test_llm_replay_fields_prints_defaults_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fields", "generation.temp"]) == 0
    out = capsys.readouterr().out
    assert "generation.temperature = 0.7" in out and "sampling temperature" in out
    assert "optim.lr" not in out
    assert main(["fields", "nosuch"]) == 2


def test_a_misspelt_key_is_answered_with_the_field_and_its_help() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'train\.iterations' \(generation rounds"):
        config_from_dict({"train": {"iteration": 3}})
