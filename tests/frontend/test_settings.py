"""A front end's replay settings read once: mappings in any of the trainers' shapes, methods and
recipes resolved by the registry, a recipe's parts under the user's, every bad field named."""

from __future__ import annotations

from typing import Any

import pytest

from llm_replay.checks import boolean, integer, number, positive
from llm_replay.config.parse import ConfigError
from llm_replay.config.recipes import RECIPES
from llm_replay.frontend.settings import (
    as_mapping,
    default_advantage,
    recipe_over,
    refuse_beyond_replay,
    refuse_rescoring,
    refuse_step_resizing,
    resolve_method,
)
from llm_replay.methods import MethodConfigError


@pytest.mark.parametrize("value", [{"capacity": 8}, '{"capacity": 8}'])
def test_a_mapping_is_read_from_a_dict_or_json(value: object) -> None:
    """(An OmegaConf node, interpolations resolved: verl's sampler tests, in verl's environment.)"""
    assert as_mapping(value, "knobs") == {"capacity": 8}
    assert as_mapping(None, "knobs") == {} == as_mapping("null", "knobs")


@pytest.mark.parametrize(
    ("value", "message"),
    [("{capacity", r"^knobs: not valid JSON"), ([1, 2], r"^knobs = \[1, 2\]: expected a mapping")],
)
def test_a_bad_mapping_is_named(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        as_mapping(value, "knobs")


def test_a_method_resolves_with_its_knobs_checked_by_the_registry() -> None:
    replay, recipe = resolve_method(
        "uniform", {"capacity": 64}, "knobs", method_field="method_name"
    )
    assert (replay.method, replay.settings.capacity, recipe) == ("uniform", 64, None)
    with pytest.raises(ConfigError, match=r"^method_name = 'nope': choose one of"):
        resolve_method("nope", {}, "knobs", method_field="method_name")
    with pytest.raises(ConfigError, match=r"^knobs\.method: name the method with method_name"):
        resolve_method("uniform", {"method": "positive"}, "knobs", method_field="method_name")
    with pytest.raises(ValueError, match=r"knobs\.capacty"):
        resolve_method("uniform", {"capacty": 64}, "knobs", method_field="method_name")


def test_a_recipe_resolves_to_its_parts_and_brings_its_advantage() -> None:
    replay, recipe = resolve_method("positive_schedule", {}, "kw", method_field="kw.method")
    assert recipe is RECIPES["positive_schedule"] and replay.method == "positive"
    assert default_advantage(recipe) == "dr_grpo" and default_advantage(None) == "grpo"


def test_the_users_fields_go_over_a_recipes_and_a_switch_off_drops_the_rest() -> None:
    recipe = {"mode": "kl_cov", "fraction": 0.05}
    assert recipe_over(recipe, {"coef": 2.0}, "mode") == {**recipe, "coef": 2.0}
    assert recipe_over(recipe, {"mode": "off"}, "mode") == {"mode": "off"}


def test_a_trainer_that_runs_only_replay_refuses_a_recipe_with_more() -> None:
    refuse_beyond_replay(RECIPES["positive_schedule"], "kw.method", "this trainer")
    with pytest.raises(ConfigError, match=r"^kw\.method = 'auto': .*which this trainer does not"):
        refuse_beyond_replay(RECIPES["auto"], "kw.method", "this trainer")


def test_the_check_helpers_name_the_field_and_raise_the_callers_error() -> None:
    assert integer("n", 3, minimum=1) == 3
    with pytest.raises(ConfigError, match=r"^n = True: must be an integer >= 1"):
        integer("n", True, minimum=1, error=ConfigError)
    with pytest.raises(ValueError, match=r"^n = 0: must be an integer >= 1"):
        integer("n", 0, minimum=1)
    assert number("x", 2) == 2.0
    for bad, why in ((float("inf"), "finite"), ("a", "a number"), (0.0, "> 0")):
        with pytest.raises(ValueError, match=f"^x = .*: must be {why}"):
            number("x", bad, positive=True)
    with pytest.raises(ValueError, match=r"^flag = 'yes': must be true or false"):
        boolean("flag", "yes")
    assert positive("p", 0.0, zero_ok=True) == 0.0
    for bad, zero_ok in ((0.0, False), (-1.0, True), (float("nan"), True)):
        with pytest.raises(MethodConfigError, match=r"^p = .*: must be finite and >"):
            positive("p", bad, zero_ok=zero_ok, error=MethodConfigError)


def test_a_trainer_without_a_reward_model_refuses_rescoring_by_name() -> None:
    def options(policy: str) -> Any:
        knobs = {"stale_rewards": {"enabled": True, "policy": policy}}
        return resolve_method("uniform", knobs, "kw", method_field="kw.method")[0].options

    refuse_rescoring(options("discount"), "kw", "this trainer")
    with pytest.raises(ConfigError, match=r"^kw\.stale_rewards\.policy = 'rescore': this trainer"):
        refuse_rescoring(options("rescore"), "kw", "this trainer")


def test_a_trainer_that_sizes_its_own_steps_refuses_a_step_the_anneal_resizes() -> None:
    def options(**anneal: Any) -> Any:
        knobs = {"anneal": {"enabled": True, "mode": "schedule", **anneal}}
        return resolve_method("positive", knobs, "kw", method_field="kw.method")[0].options

    refuse_step_resizing(options(), "kw", "this trainer")
    with pytest.raises(
        ConfigError, match=r"^kw\.anneal\.on_policy_batch_size = 128: this trainer sizes"
    ):
        refuse_step_resizing(options(on_policy_batch_size=128), "kw", "this trainer")
