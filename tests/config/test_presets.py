"""Presets: shipped in the package and found by name, `extends:` by name or path, the base preset
equal to the code's defaults, presets kept short, every bad chain one line naming its files."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.config import ConfigError, load_config
from llm_replay.config.files import (
    MAX_EXTENDS_DEPTH,
    PRESETS_DIR,
    Preset,
    find_config,
    preset_names,
    preset_path,
)
from tests.conftest import ROOT

PRESET_FILES = sorted(PRESETS_DIR.rglob("*.yaml"))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_presets_ship_in_the_package_and_the_repository_keeps_only_experiments() -> None:
    assert PRESETS_DIR.parent == ROOT / "src" / "llm_replay"
    assert {"auto", "on_policy", "positive", "base/chain_sum"} <= set(preset_names())
    assert all(p.name.startswith("experiment") for p in (ROOT / "configs").glob("*.yaml"))
    assert not (ROOT / "configs" / "base").exists()


def test_the_base_preset_is_the_codes_defaults() -> None:
    assert load_config("base/chain_sum") == load_config(None)


@pytest.mark.parametrize("path", PRESET_FILES, ids=lambda p: p.stem)
def test_a_preset_is_short_or_says_why_and_opens_with_its_one_line_summary(path: Path) -> None:
    lines = path.read_text().splitlines()
    settings = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert len(settings) <= 15 or any(line.startswith("# Longer than 15 lines:") for line in lines)
    assert lines[0].startswith("# ") and lines[0].endswith(".") and len(lines[0]) <= 100
    name = path.relative_to(PRESETS_DIR).with_suffix("").as_posix()
    assert load_config(name) == load_config(path)
    extends = Preset.read(name).extends
    assert extends is None or extends in preset_names()  # presets extend by name, never by path


def test_a_name_is_found_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_config("auto") == PRESETS_DIR / "auto.yaml"
    assert load_config("auto").replay.method == "positive"  # the recipe, resolved


def test_a_copied_edited_preset_trains_where_it_was_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = (PRESETS_DIR / "positive_anneal.yaml").read_text()
    write(tmp_path / "mine.yaml", text.replace("name: positive_anneal", "name: mine"))
    config = load_config("mine.yaml", ["replay.anneal.end=0.8"])
    assert config.name == "mine" and config.replay.options["anneal"].end == 0.8
    assert config.replay.method == load_config("positive_anneal").replay.method


def test_show_prints_a_preset_whole_that_loads_as_the_preset(tmp_path: Path) -> None:
    shown = Preset.read("positive_anneal").resolved_yaml()
    assert shown.startswith("# positive_anneal: ") and "extends" not in shown.split("\n", 3)[3]
    copy = write(tmp_path / "copy.yaml", shown)
    assert load_config(copy) == load_config("positive_anneal")


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
    write(tmp_path / "base.yaml", "extends: base/chain_sum\n")
    child = write(
        tmp_path / "spell.yaml",
        "extends: base.yaml\ntask:\n  dataset: spell_backward\n"
        "  params: {min_word_len: 3, max_word_len: 5}\n",
    )
    assert load_config(child).task.params == {"min_word_len": 3, "max_word_len": 5}


def test_an_extends_cycle_or_a_bad_value_is_named(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_config(tmp_path / "a.yaml")
    write(tmp_path / "d.yaml", "extends: [a.yaml]\n")
    with pytest.raises(ConfigError, match=r"extends = \['a\.yaml'\]"):
        load_config(tmp_path / "d.yaml")


def test_an_extends_that_names_nothing_names_the_file_that_points_and_where_it_looked(
    tmp_path: Path,
) -> None:
    pointing = write(tmp_path / "c.yaml", "extends: nowhere\n")
    with pytest.raises(ConfigError) as caught:
        load_config(pointing)
    message = str(caught.value)
    assert str(pointing) in message and "'nowhere'" in message
    assert "no preset of that name" in message and str(tmp_path / "nowhere") in message
    assert "\n" not in message
    write(tmp_path / "e.yaml", "extends: positive.yaml\n")  # a preset's old file name
    with pytest.raises(ConfigError, match="did you mean the preset 'positive'"):
        load_config(tmp_path / "e.yaml")


def test_a_name_that_is_both_a_preset_and_a_file_is_an_error_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "positive", "name: mine\n")
    child = write(tmp_path / "child.yaml", "extends: positive\n")
    with pytest.raises(ConfigError) as caught:
        load_config(child)
    assert str(PRESETS_DIR / "positive.yaml") in str(caught.value)
    assert str(tmp_path / "positive") in str(caught.value)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"both the preset 'positive'"):
        load_config("positive")
    assert load_config("./positive").name == "mine"  # a path, named as one


def test_a_chain_deeper_than_the_bound_is_one_line_naming_the_chain(tmp_path: Path) -> None:
    for depth in range(1000):
        write(tmp_path / f"p{depth}.yaml", f"extends: p{depth + 1}.yaml\n")
    write(tmp_path / "p1000.yaml", "name: deep\n")
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "p0.yaml")
    message = str(caught.value)
    assert f"more than {MAX_EXTENDS_DEPTH} files deep" in message
    assert str(tmp_path / "p0.yaml") in message and "more …" in message and len(message) < 1000
    shallow = tmp_path / f"p{1001 - MAX_EXTENDS_DEPTH}.yaml"
    assert load_config(shallow).name == "deep"  # a chain of exactly the bound still loads


@pytest.mark.parametrize("text", ["../presets/auto", "/etc/passwd", "auto.yaml", "", "a\\b"])
def test_only_a_presets_own_name_is_a_preset(text: str) -> None:
    assert preset_path(text) is None


def test_an_unknown_preset_to_show_lists_the_names() -> None:
    with pytest.raises(ConfigError, match=r"no such preset; choose one of .*on_policy"):
        Preset.read("nope")
