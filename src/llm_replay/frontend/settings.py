"""A front end's replay settings from what its user wrote: a method or a recipe, and its knobs.

Every trainer takes them its own way (TRL as config fields, some of them JSON strings on the
command line; verl as an OmegaConf node under `sampler_kwargs`), and each used to resolve recipes
and check fields by hand. Here the mapping is read once (`as_mapping`), the method or recipe is
resolved once (`resolve_method`), and a recipe's parts reach the front end's own settings field
by field under the user's (`recipe_over`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llm_replay.config import ReplayConfig
from llm_replay.config.parse import ConfigError
from llm_replay.config.recipes import RECIPES, Recipe
from llm_replay.methods import METHODS, OPTIONS, OptionConfig
from llm_replay.methods.host import needs_reward_model


def as_mapping(value: Any, where: str, what: str = "setting") -> dict[str, Any]:
    """A mapping given as a dict, a JSON string (a command line), an OmegaConf node
    (interpolations resolved) or None (empty); anything else is refused naming `where`."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{where}: not valid JSON ({error})") from None
        if value is None:
            return {}
    try:
        from omegaconf import OmegaConf
    except ImportError:  # omegaconf comes with the trainers that hand it over
        OmegaConf = None
    if OmegaConf is not None and OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} = {value!r}: expected a mapping of {what} to value")
    return {str(k): v for k, v in value.items()}


def resolve_method(
    method: Any, knobs: Mapping[str, Any], where: str, *, method_field: str
) -> tuple[ReplayConfig, Recipe | None]:
    """The method (or recipe) `method` with `knobs`, validated by the registry as `replay:` is in
    a run config; `where` prefixes a knob's name in an error, `method_field` names the method."""
    name = str(method)
    if name not in METHODS and name not in RECIPES:
        raise ConfigError(
            f"{method_field} = {method!r}: choose one of {sorted(METHODS)} or a recipe: "
            f"{sorted(RECIPES)}"
        )
    if "method" in knobs and method_field != f"{where}.method":
        raise ConfigError(f"{where}.method: name the method with {method_field}")
    replay = ReplayConfig.from_mapping({**knobs, "method": name}, where)
    return replay, RECIPES.get(name)


def recipe_over(recipe: dict[str, Any], given: dict[str, Any], switch: str) -> dict[str, Any]:
    """The user's fields over a recipe's, field by field, as `--set` does in a run config; a
    user's `switch` field that turns the part off (or to another mode) drops the recipe's other
    fields, which belong to its own setting of it."""
    if switch in given and given[switch] != recipe.get(switch):
        return given
    return {**recipe, **given}


def refuse_beyond_replay(recipe: Recipe | None, field: str, trainer: str) -> None:
    """A trainer that only samples rows and computes the loss runs none of a recipe's generation
    settings, gradient step and token control, so the recipe would not be the method measured
    under its name: refused, pointing to the recipe of its replay and loss alone where there is
    one."""
    if recipe is None or not recipe.beyond_replay():
        return
    alone = [
        r.name
        for r in RECIPES.values()
        if not r.beyond_replay() and r.replay == recipe.replay and r.loss == recipe.loss
    ]
    raise ConfigError(
        f"{field} = {recipe.name!r}: the recipe also sets {', '.join(recipe.beyond_replay())}, "
        f"which {trainer} does not run, so it would not be the method measured under that name"
        + (f"; method={alone[0]} is its replay and loss alone" if alone else "")
    )


def refuse_rescoring(options: Mapping[str, OptionConfig], prefix: str, trainer: str) -> None:
    """A trainer that scores rollouts with its own reward functions lends no reward model to
    re-score stored rows with, so an option set to (`stale_rewards.policy = 'rescore'`) is
    refused before the run starts, not at its first stale round."""
    rescoring = needs_reward_model(options)
    if rescoring:
        raise ConfigError(
            f"{prefix}.{rescoring[0]}: {trainer} has no reward model of its own to re-score "
            "with; keep, evict or discount stale rows instead"
        )


def refuse_step_resizing(options: Mapping[str, OptionConfig], prefix: str, trainer: str) -> None:
    """A trainer whose gradient step is its own size (TRL's per-device batch, verl's
    mini-batch) cannot take a step that an option resizes during the run (the anneal's
    `on_policy_batch_size`): refused before the run starts, naming the knob."""
    for name, option in options.items():
        knob = OPTIONS[name].resizes_steps(option) if option.enabled else None
        if knob is not None:
            raise ConfigError(
                f"{prefix}.{name}.{knob} = {getattr(option, knob)!r}: {trainer} sizes its "
                "gradient steps itself, so the step cannot change with the anneal; leave it unset"
            )


def default_advantage(recipe: Recipe | None) -> str:
    """The advantage estimator a recipe was measured with (grpo where it names none)."""
    return "grpo" if recipe is None else str(recipe.algorithm.get("advantage", "grpo"))


def lookup(root: Any, dotted: str) -> Any:
    """`root.a.b.c` in a trainer's nested config (a dict or an OmegaConf node), or None where
    any part is missing."""
    node = root
    for part in dotted.split("."):
        if node is None:
            return None
        getter = getattr(node, "get", None)
        node = getter(part) if callable(getter) else None
    return node


def lookup_int(root: Any, dotted: str) -> int | None:
    """`lookup` as an int (None where missing or a bool)."""
    value = lookup(root, dotted)
    return None if value is None or isinstance(value, bool) else int(value)
