"""Layered presets: `extends:`, the base preset equal to the code's defaults, presets kept short."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.config import ConfigError, load_config
from tests.conftest import ROOT

PRESETS = sorted(p for p in (ROOT / "configs").glob("*.yaml") if "experiment" not in p.name)


def test_the_base_preset_is_the_codes_defaults() -> None:
    assert load_config(ROOT / "configs" / "base" / "chain_sum.yaml") == load_config(None)


@pytest.mark.parametrize("path", [*PRESETS, ROOT / "configs/base/chain_sum.yaml"], ids=str)
def test_a_preset_is_at_most_15_setting_lines_or_says_why(path: Path) -> None:
    lines = path.read_text().splitlines()
    settings = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert len(settings) <= 15 or any(line.startswith("# Longer than 15 lines:") for line in lines)
    load_config(path)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_extends_merges_mappings_and_the_child_wins(tmp_path: Path) -> None:
    write(
        tmp_path / "base.yaml", "generation: {group_size: 4, temperature: 0.9}\ntrain: {seed: 3}\n"
    )
    child = write(
        tmp_path / "child.yaml", "extends: base.yaml\ngeneration: {group_size: 6}\nname: child\n"
    )
    config = load_config(child)
    assert (config.generation.group_size, config.generation.temperature) == (6, 0.9)
    assert config.train.seed == 3 and config.name == "child"


def test_a_datasets_params_are_replaced_whole_not_mixed(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", "extends: " + str(ROOT / "configs/base/chain_sum.yaml") + "\n")
    child = write(
        tmp_path / "spell.yaml",
        "extends: base.yaml\ntask:\n  dataset: spell_backward\n"
        "  params: {min_word_len: 3, max_word_len: 5}\n",
    )
    assert load_config(child).task.params == {"min_word_len": 3, "max_word_len": 5}


def test_an_extends_cycle_or_a_missing_parent_is_named(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_config(tmp_path / "a.yaml")
    write(tmp_path / "c.yaml", "extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"nowhere\.yaml: no such config file"):
        load_config(tmp_path / "c.yaml")
    write(tmp_path / "d.yaml", "extends: [a.yaml]\n")
    with pytest.raises(ConfigError, match=r"extends = \['a\.yaml'\]"):
        load_config(tmp_path / "d.yaml")
