"""`train.steps_per_round`: the step as a share of the round, resolved into train.batch_size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llm_replay.config import Config, ConfigError, config_from_dict, load_config
from llm_replay.config.files import Preset
from llm_replay.config.sections import GenerationConfig, TrainConfig
from llm_replay.config.steps import resolve_steps
from llm_replay.experiments.archive import protocol_differences


@pytest.mark.parametrize(
    ("prompts", "group", "steps", "step"),
    [(32, 8, 2, 128), (64, 8, 2, 256), (16, 4, 2, 32), (32, 8, 1, 256), (32, 8, 4, 64)],
)
def test_the_step_is_the_rounds_rollouts_over_the_steps(
    prompts: int, group: int, steps: int, step: int
) -> None:
    config = load_config(
        "on_policy",
        [
            f"generation.prompts_per_step={prompts}",
            f"generation.group_size={group}",
            f"train.steps_per_round={steps}",
        ],
    )
    assert config.train.batch_size == step
    assert config.train.micro_batch_size == min(256, step)
    assert config.train.steps_per_round == steps


def test_auto_steps2_is_two_steps_of_the_built_in_round_and_of_any_other() -> None:
    built_in = load_config("auto_steps2")
    assert (built_in.train.batch_size, built_in.train.micro_batch_size) == (128, 128)
    larger = load_config("auto_steps2", ["generation.prompts_per_step=64"])
    assert larger.train.batch_size * 2 == larger.generation.rollouts_per_step == 512


def test_a_smaller_micro_batch_is_kept_and_a_larger_one_held_to_the_step() -> None:
    kept = load_config("on_policy", ["train.steps_per_round=2", "train.micro_batch_size=32"])
    assert (kept.train.batch_size, kept.train.micro_batch_size) == (128, 32)
    held = load_config("on_policy", ["train.steps_per_round=4", "train.micro_batch_size=200"])
    assert (held.train.batch_size, held.train.micro_batch_size) == (64, 64)


def test_a_batch_size_of_its_own_beside_it_is_refused_naming_both() -> None:
    with pytest.raises(
        ConfigError, match=r"train\.batch_size = 64: not with train\.steps_per_round = 2"
    ):
        load_config("on_policy", ["train.steps_per_round=2", "train.batch_size=64"])
    same = load_config("on_policy", ["train.steps_per_round=2", "train.batch_size=128"])
    assert same.train.batch_size == 128


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", r"train\.steps_per_round = 0: must be an integer >= 1"),
        ("-2", r"train\.steps_per_round = -2: must be an integer >= 1"),
        ("1.5", r"train\.steps_per_round = 1\.5: must be an integer >= 1"),
        ("true", r"train\.steps_per_round = True: must be an integer >= 1"),
        (
            "3",
            r"train\.steps_per_round = 3: must divide a round's rollouts .* = 256\); 2 or 4 would",
        ),
    ],
)
def test_a_bad_count_is_refused_by_name(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("on_policy", [f"train.steps_per_round={value}"])


def test_a_bad_round_is_named_as_the_generation_field() -> None:
    with pytest.raises(ConfigError, match=r"generation\.group_size = 0"):
        load_config("on_policy", ["train.steps_per_round=2", "generation.group_size=0"])


def test_a_mapping_without_it_is_returned_as_it_is() -> None:
    data = {"train": {"batch_size": 64}, "generation": {"group_size": 4}}
    assert resolve_steps(data) is data
    assert resolve_steps({}) == {}


def test_the_resolved_config_reads_back_the_same() -> None:
    """A saved config (every run's `config.json` and protocol) loads back to the same run."""
    first = load_config("auto_steps2", ["generation.prompts_per_step=16"])
    again = config_from_dict(json.loads(json.dumps(first.to_dict())))
    assert again.to_dict() == first.to_dict()
    assert protocol_differences(first.to_dict(), again.to_dict()) == []


def test_a_config_built_in_code_with_a_step_that_does_not_match_is_refused() -> None:
    config = Config(
        generation=GenerationConfig(prompts_per_step=32, group_size=8),
        train=TrainConfig(steps_per_round=2),
    )
    with pytest.raises(ConfigError, match=r"train\.batch_size = 256: not the step"):
        config.check()
    Config(
        generation=GenerationConfig(prompts_per_step=32, group_size=8),
        train=TrainConfig(steps_per_round=2, batch_size=128),
    ).check()


@pytest.mark.parametrize("preset", ["auto", "auto_steps1", "auto_steps2", "on_policy"])
def test_presets_show_writes_the_step_out_and_its_copy_loads_the_same_run(
    preset: str, tmp_path: Path
) -> None:
    """`presets --show` is there to be copied: its step is the one the preset trains (a recipe's
    `steps_per_round` written out), and the copy loads to the same config."""
    text = Preset.read(preset).resolved_yaml()
    shown = yaml.safe_load(text)
    expected = load_config(preset)
    assert shown["train"]["batch_size"] == expected.train.batch_size
    copy = tmp_path / "mine.yaml"
    copy.write_text(text)
    assert load_config(copy).to_dict() == expected.to_dict()
