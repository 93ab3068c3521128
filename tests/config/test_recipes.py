"""Recipes (`replay.method: auto`): resolved into their parts when read, the user's settings win,
and archived runs made under the parts count as the recipe's."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from llm_replay.config import ConfigError, load_config
from llm_replay.config.recipes import RECIPES, resolve, resolve_replay
from llm_replay.experiments.archive import protocol_differences
from llm_replay.experiments.compare import load_experiment, protocol_of, run_config

ROOT = Path(__file__).resolve().parents[2]


def without_name(protocol: dict) -> dict:
    return {k: v for k, v in protocol.items() if k != "name"}


def test_auto_is_positive_replay_with_asymre_annealed_by_the_schedule() -> None:
    config = load_config(None, ["replay.method=auto"])
    assert config.replay.method == "positive"
    assert (config.replay.settings.capacity, config.replay.settings.delta) == (1024, 0.5)
    assert config.replay.settings.replay_ratio == 2.0
    anneal = dict(config.replay.enabled_options())["anneal"]
    assert (anneal.mode, anneal.start, anneal.end) == ("schedule", 0.1, 0.6)
    assert (config.algorithm.loss, config.algorithm.advantage) == ("asymre", "dr_grpo")
    assert config.algorithm.loss_settings.delta_v == -0.1
    # the resolved config records the parts, never the recipe's name
    assert "auto" not in json.dumps(protocol_of(config)["replay"])


def test_the_preset_is_the_measured_schedule_row_exactly() -> None:
    measured = load_config("positive_anneal", ["replay.anneal.mode=schedule"])
    recipe = load_config("auto")
    assert without_name(protocol_of(recipe)) == without_name(protocol_of(measured))


@pytest.mark.parametrize("experiment", ["experiment.yaml", "experiment_spell.yaml"])
def test_archived_schedule_runs_count_as_autos(experiment: str) -> None:
    """The runs behind the recipe's figures were made before it existed; the experiments now name
    auto for that row, and the archive accepts them as made under it."""
    loaded = load_experiment(ROOT / "configs" / experiment)
    method = loaded.method("positive_schedule")
    for seed in (0, 1, 2):
        archived = ROOT / loaded.archive / "positive_schedule" / f"seed-{seed}" / "protocol.json"
        current = protocol_of(run_config(loaded, method, seed))
        assert protocol_differences(json.loads(archived.read_text()), current) == []


def test_the_users_settings_win_knob_by_knob() -> None:
    config = load_config(
        None, ["replay.method=auto", "replay.anneal.end=0.8", "replay.replay_ratio=3"]
    )
    anneal = dict(config.replay.enabled_options())["anneal"]
    assert (anneal.mode, anneal.start, anneal.end) == ("schedule", 0.1, 0.8)
    assert config.replay.settings.replay_ratio == 3.0
    assert config.replay.settings.delta == 0.5


def test_a_loss_the_user_names_replaces_the_recipes_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        config = load_config(None, ["replay.method=auto", "algorithm.loss=tis"])
    assert config.algorithm.loss == "tis" and config.algorithm.advantage == "grpo"
    assert "measured with algorithm.loss = 'asymre'" in caplog.text
    # the recipe's advantage alone cannot pair with the loss it needs: named, not guessed
    with pytest.raises(ConfigError, match="advantage = 'grpo': loss 'asymre' needs 'dr_grpo'"):
        load_config(None, ["replay.method=auto", "algorithm.advantage=grpo"])


def test_other_methods_pass_through_untouched() -> None:
    data = {"method": "uniform", "capacity": 64}
    assert resolve_replay(data) is data
    whole = {"replay": data, "algorithm": {"loss": "grpo"}}
    assert resolve(whole) is whole


def test_an_unknown_method_names_the_recipes_too() -> None:
    with pytest.raises(ConfigError, match=r"replay.method = 'nope': choose one of .* or a recipe"):
        load_config(None, ["replay.method=nope"])


def test_every_recipe_resolves_to_a_registered_method_and_lists_its_parts() -> None:
    for recipe in RECIPES.values():
        config = load_config(None, [f"replay.method={recipe.name}"])
        assert config.replay.method == recipe.method
        parts = dict(recipe.parts())
        assert parts["replay.method"] == recipe.method
        described = recipe.describe()
        assert described["kind"] == "recipe" and described["knobs"]


def test_archives_made_under_the_old_name_of_compute_optimal_still_match() -> None:
    archived = {"replay": {"method": "auto", "rho": 1.0}}
    assert (
        protocol_differences(archived, {"replay": {"method": "compute_optimal", "rho": 1.0}}) == []
    )
    assert protocol_differences(archived, {"replay": {"method": "positive", "rho": 1.0}}) == [
        "replay.method: 'compute_optimal' -> 'positive'"
    ]
