"""Recipes (`replay.method: auto`, `positive_schedule`): resolved into their parts when read, the
user's settings win, and archived runs made under the parts count as the recipe's."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from llm_replay.config import ConfigError, load_config
from llm_replay.config.recipes import RECIPES, resolve, resolve_replay
from llm_replay.experiments.archive import archived_dir, protocol_differences
from llm_replay.experiments.compare import Experiment, load_experiment, protocol_of, run_config
from llm_replay.experiments.suite import is_suite, load_suite

ROOT = Path(__file__).resolve().parents[2]


RECIPE_SECTIONS = (
    "replay.",
    "algorithm.",
    "generation.adaptive.",
    "train.batch_size",
    "train.micro_batch_size",
)
"""What a recipe sets, as a saved protocol records it (`train.steps_per_round` is how the step is
asked for; the step trained is `train.batch_size`)."""


def without_name(protocol: dict) -> dict:
    return {k: v for k, v in protocol.items() if k != "name"}


def test_positive_schedule_is_positive_replay_with_asymre_annealed_by_the_schedule() -> None:
    config = load_config(None, ["replay.method=positive_schedule"])
    assert config.replay.method == "positive"
    assert (config.replay.settings.capacity, config.replay.settings.delta) == (1024, 0.5)
    assert config.replay.settings.replay_ratio == 2.0
    anneal = dict(config.replay.enabled_options())["anneal"]
    assert (anneal.mode, anneal.start, anneal.end) == ("schedule", 0.1, 0.6)
    assert (config.algorithm.loss, config.algorithm.advantage) == ("asymre", "dr_grpo")
    assert config.algorithm.loss_settings.delta_v == -0.1
    assert config.algorithm.token_control == "off" and not config.generation.adaptive.enabled
    # the resolved config records the parts, never the recipe's name
    assert "schedule" not in json.dumps(protocol_of(config)["replay"]["method"])


def test_auto_is_the_schedule_with_kl_cov_on_reused_tokens_and_adaptive_rollouts() -> None:
    auto = load_config(None, ["replay.method=auto"])
    schedule = load_config(None, ["replay.method=positive_schedule"])
    assert auto.replay.to_dict() == schedule.replay.to_dict()
    assert (auto.algorithm.loss, auto.algorithm.loss_settings.delta_v) == ("asymre", -0.1)
    control = auto.algorithm.token_controls()
    assert (control.mode, control.rows, control.fraction, control.coef) == (
        "kl_cov",
        "replayed",
        0.05,
        1.0,
    )
    adaptive = auto.generation.adaptive
    assert (adaptive.enabled, adaptive.stage_size, adaptive.reuse) == (True, 2, True)
    assert "auto" not in json.dumps(protocol_of(auto)["replay"])


def test_the_presets_are_the_measured_rows_exactly() -> None:
    measured = load_config("positive_anneal", ["replay.anneal.mode=schedule"])
    assert without_name(protocol_of(load_config("positive_schedule"))) == without_name(
        protocol_of(measured)
    )
    # `auto` from #38 to #53 (`auto_steps1`) is the row issue #38 measured as auto_kl_cov_ar3po,
    # on every task and in TRL; `auto` is that row at two steps a round
    row = without_name(protocol_of(load_config("auto_kl_cov_ar3po")))
    one = without_name(protocol_of(load_config("auto_steps1")))
    assert _keys(row, one) == {"train.steps_per_round"}
    two = load_config("auto")
    assert _keys(row, without_name(protocol_of(two))) == {
        "train.steps_per_round",
        "train.batch_size",
        "train.micro_batch_size",
    }
    assert (two.train.steps_per_round, two.train.batch_size, two.train.micro_batch_size) == (
        2,
        128,
        128,
    )
    assert (
        _keys(without_name(protocol_of(two)), without_name(protocol_of(load_config("auto_steps2"))))
        == set()
    )


@pytest.mark.parametrize(
    ("experiment", "row"),
    [
        ("experiment.yaml", "positive_schedule"),
        ("experiment_spell.yaml", "positive_schedule"),
        ("experiment.yaml", "auto_kl_cov_ar3po"),
        ("experiment_spell.yaml", "auto_kl_cov_ar3po"),
    ],
)
def test_archived_runs_count_as_the_recipes(experiment: str, row: str) -> None:
    """The runs behind each recipe's figures were made under its parts (the schedule's before
    the recipe existed); the archive accepts them as made under it."""
    loaded = load_experiment(ROOT / "configs" / experiment)
    method = loaded.method(row)
    recipe = "positive_schedule" if row == "positive_schedule" else "auto_steps1"
    for seed in (0, 1):
        archived = ROOT / loaded.archive / row / f"seed-{seed}" / "protocol.json"
        current = protocol_of(run_config(loaded, method, seed))
        assert protocol_differences(json.loads(archived.read_text()), current) == []
        differing = _keys(protocol_of(load_config(recipe)), current)
        assert not {k for k in differing if k.startswith(RECIPE_SECTIONS)}


def _experiments(path: Path) -> list[Experiment]:
    return list(load_suite(path).tasks.values()) if is_suite(path) else [load_experiment(path)]


@pytest.mark.parametrize(
    ("experiment", "row", "preset"),
    [
        ("experiment_suite_group_sweep_5seeds.yaml", "auto_steps2", "auto_steps2"),
        ("experiment_heldout_sweep.yaml", "auto_steps2", "auto_steps2"),
        ("experiment_palindrome.yaml", "auto_steps2", "auto_steps2"),
        ("experiment_chain_sum_sweep.yaml", "auto_steps2", "auto_steps2"),
        ("experiment_spell_sweep_5seeds.yaml", "auto_steps2", "auto_steps2"),
        ("experiment_countdown_10seeds.yaml", "auto_steps2_2x", "auto_steps2"),
        ("experiment_suite_step_anneal.yaml", "auto_steps8to2", "auto_steps8to2"),
        ("experiment_chain_sum_step_anneal.yaml", "auto_steps8to2", "auto_steps8to2"),
    ],
)
def test_a_steps_preset_is_the_row_read_against_a_tuned_on_policy(
    experiment: str, row: str, preset: str
) -> None:
    """`auto_steps2`'s figures (docs/methods.md, "Against a tuned on-policy") and
    `auto_steps8to2`'s (docs/RESULTS.md) are these rows, archived as they are configured; the
    preset trains what they measured, in every setting but those the experiment sets for all its
    rows (where its baseline differs from the `on_policy` preset: task, model, evaluation) and the
    row's budget. `train.steps_per_round` is how a preset asks for its step, and the rows set
    `train.batch_size` itself: the step trained is compared, as `train.batch_size`."""
    asked = {"train.steps_per_round"}
    for loaded in _experiments(ROOT / "configs" / experiment):
        current = protocol_of(run_config(loaded, loaded.method(row), 0))
        archived = archived_dir(ROOT / loaded.archive, row, 0) / "protocol.json"
        assert protocol_differences(json.loads(archived.read_text()), current) == []
        baseline = protocol_of(run_config(loaded, loaded.method(loaded.baseline), 0))
        shared = {*_keys(protocol_of(load_config("on_policy")), baseline), "train.compute_budget"}
        assert _keys(protocol_of(load_config(preset)), current) - asked <= shared


def _keys(one: dict, other: dict) -> set[str]:
    """The settings two protocols differ in, the rows' names aside."""
    differing = protocol_differences(without_name(one), without_name(other))
    return {line.split(":")[0] for line in differing}


def test_the_recipes_algorithm_settings_come_with_its_loss_or_none() -> None:
    named = load_config(None, ["replay.method=auto", "algorithm.loss=asymre"])
    assert named.algorithm.token_control == "kl_cov" and named.algorithm.advantage == "dr_grpo"
    off = load_config(
        None,
        ["replay.method=auto", "algorithm.token_control=off", "generation.adaptive.enabled=false"],
    )
    assert off.algorithm.token_control == "off" and not off.generation.adaptive.enabled
    assert off.replay.to_dict() == load_config("positive_schedule").replay.to_dict()


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
    assert config.algorithm.token_control == "off"  # the recipe's algorithm settings go with it
    assert "measured with algorithm.loss = 'asymre'" in caplog.text
    # issue #54: the warning said `algorithm.token_control (kl_cov)` stays; it is off
    assert "algorithm.token_control = 'off', not the recipe's 'kl_cov'" in caplog.text
    assert "its generation settings stay: generation.adaptive)" in caplog.text
    assert "token_control (kl_cov)" not in caplog.text
    assert config.generation.adaptive.enabled  # what the warning says stays, does
    # the recipe's advantage alone cannot pair with the loss it needs: named, not guessed
    with pytest.raises(ConfigError, match="advantage = 'grpo': loss 'asymre' needs 'dr_grpo'"):
        load_config(None, ["replay.method=auto", "algorithm.advantage=grpo"])


def test_a_refusal_of_a_part_the_recipe_set_says_where_it_came_from() -> None:
    hint = r"replay.method 'auto' turns generation.adaptive on; set generation.adaptive.enabled"
    with pytest.raises(ConfigError, match=r"stage_size = 2: must divide group_size = 5.*" + hint):
        load_config(None, ["replay.method=auto", "generation.group_size=5"])
    with pytest.raises(ConfigError, match=r"dynamic_sampling: choose one.*" + hint):
        load_config(None, ["replay.method=auto", "generation.dynamic_sampling=true"])
    # the same refusal for a setting the user made names no recipe
    with pytest.raises(ConfigError, match=r"must divide group_size = 5") as own:
        load_config(
            None,
            ["replay.method=auto", "generation.group_size=5", "generation.adaptive.stage_size=2"],
        )
    assert "replay.method" not in str(own.value)
    assert load_config(
        None, ["replay.method=auto", "generation.group_size=5", "generation.adaptive.enabled=false"]
    )


def test_a_token_control_of_another_mode_leaves_the_recipes_control_knobs() -> None:
    clip = load_config(None, ["replay.method=auto", "algorithm.token_control=clip_cov"])
    plain = load_config(None, ["algorithm.token_control=clip_cov"])
    assert clip.algorithm.control_fraction == plain.algorithm.control_fraction  # Clip-Cov's own
    assert clip.algorithm.control_rows == plain.algorithm.control_rows


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


def test_autos_two_steps_a_round_yield_to_a_step_the_user_sized() -> None:
    """The recipe's `train.steps_per_round` goes under the user's settings: a step given in
    rollouts (`train.batch_size` other than the default) or as steps a round is kept."""
    assert load_config(None, ["replay.method=auto"]).train.batch_size == 128
    assert load_config("auto", ["generation.prompts_per_step=64"]).train.batch_size == 256
    own = load_config("auto", ["train.batch_size=64"])
    assert (own.train.batch_size, own.train.steps_per_round) == (64, None)
    one = load_config("auto", ["train.steps_per_round=1"])
    assert (one.train.batch_size, one.train.steps_per_round) == (256, 1)
    assert load_config("positive_schedule").train.batch_size == 256  # its own parts only
    assert RECIPES["auto"].train == {"steps_per_round": 2}
    assert ("train.steps_per_round", 2) in RECIPES["auto"].parts()
    assert "train.steps_per_round" in RECIPES["auto"].beyond_replay()
