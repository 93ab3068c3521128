"""`trainer.v1.sampler.sampler_kwargs`: the replay method, its knobs, and the sampler's own few.

Every key that is not one of the sampler's own (`SAMPLER_KEYS`) goes to llm-replay's method
registry exactly as under `replay:` in an llm-replay config, so a wrong knob fails when verl
builds the sampler, before a model is loaded, and the error names it
(`sampler_kwargs.delta = 2: must be in [0, 1]`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llm_replay.algorithms.advantages import ADVANTAGES
from llm_replay.config import ReplayConfig
from llm_replay.config.parse import ConfigError
from llm_replay.config.recipes import RECIPES
from llm_replay.integrations.verl.startup import PREFIX
from llm_replay.integrations.verl.startup import lookup as lookup  # re-exported for sampler.py
from llm_replay.integrations.verl.startup import startup_problems as startup_problems
from llm_replay.methods.host import follows_progress, reads_measured_mu

SAMPLER_KEYS = (
    "correct_threshold",
    "advantage",
    "sampling_weights",
    "checkpoint_dir",
    "group_size",
    "mini_batch_prompts",
    "total_steps",
    "seed",
)


def plain_mapping(value: Any, where: str) -> dict[str, Any]:
    """A DictConfig (interpolations resolved) or a mapping as a plain dict."""
    if value is None:
        return {}
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        OmegaConf = None
    if OmegaConf is not None and OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if not isinstance(value, dict):
        raise ConfigError(f"{where} = {value!r}: expected a mapping")
    return {str(k): v for k, v in value.items()}


def _optional_int(data: dict[str, Any], name: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{PREFIX}.{name} = {value!r}: must be an integer >= 1")
    return value


@dataclass(frozen=True)
class SamplerSettings:
    replay: ReplayConfig
    correct_threshold: float = 1.0  # a trajectory whose summed rm_scores reach this is a success
    advantage: str = "grpo"  # how a fresh group's advantages are computed (grpo | dr_grpo | rloo)
    sampling_weights: bool = False  # scale each drawn row's advantage by its importance weight
    checkpoint_dir: str | None = None  # verl's trainer.default_local_dir, for resuming
    group_size: int | None = None  # rollout.n (else read from verl's config, else the data)
    mini_batch_prompts: int | None = None  # actor.ppo_mini_batch_size (else verl's config)
    total_steps: int | None = None  # for methods that follow the run's progress
    seed: int = 0
    recipe: str | None = None  # the recipe `method` named (`positive_schedule`), resolved

    @classmethod
    def from_kwargs(cls, sampler_kwargs: Any) -> SamplerSettings:
        data = plain_mapping(sampler_kwargs, PREFIX)
        own = {k: data.pop(k) for k in SAMPLER_KEYS if k in data}
        if "method" not in data:
            raise ConfigError(f"{PREFIX}.method: name a replay method (`llm-replay methods`)")
        if data.get("init_from") is not None:
            raise ConfigError(
                f"{PREFIX}.init_from: a table filled outside verl has no verl trajectories to "
                "replay; start from an empty table"
            )
        recipe = RECIPES.get(str(data["method"]))
        if recipe is not None and recipe.beyond_replay():
            alone = [
                r.name
                for r in RECIPES.values()
                if not r.beyond_replay() and r.replay == recipe.replay and r.loss == recipe.loss
            ]
            raise ConfigError(
                f"{PREFIX}.method = {recipe.name!r}: the recipe also sets "
                f"{', '.join(recipe.beyond_replay())}, which verl's trainer does not run (the "
                "rollout and the loss's token terms are verl's own; docs/verl.md), so it would "
                "not be the method measured under that name"
                + (f"; method={alone[0]} is its replay and loss alone" if alone else "")
            )
        replay = ReplayConfig.from_mapping(data, PREFIX)
        threshold = own.get("correct_threshold", 1.0)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ConfigError(f"{PREFIX}.correct_threshold = {threshold!r}: must be a number")
        if not math.isfinite(threshold):
            raise ConfigError(f"{PREFIX}.correct_threshold = {threshold!r}: must be finite")
        default_advantage = "grpo" if recipe is None else recipe.algorithm.get("advantage", "grpo")
        advantage = own.get("advantage", default_advantage)
        if advantage not in ADVANTAGES:
            raise ConfigError(
                f"{PREFIX}.advantage = {advantage!r}: choose one of {sorted(ADVANTAGES)}"
            )
        weights = own.get("sampling_weights", False)
        if not isinstance(weights, bool):
            raise ConfigError(f"{PREFIX}.sampling_weights = {weights!r}: must be true or false")
        directory = own.get("checkpoint_dir")
        if directory is not None and not isinstance(directory, str):
            raise ConfigError(f"{PREFIX}.checkpoint_dir = {directory!r}: must be a path")
        seed = own.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"{PREFIX}.seed = {seed!r}: must be an integer >= 0")
        return cls(
            replay=replay,
            correct_threshold=float(threshold),
            advantage=advantage,
            sampling_weights=weights,
            checkpoint_dir=directory,
            group_size=_optional_int(own, "group_size"),
            mini_batch_prompts=_optional_int(own, "mini_batch_prompts"),
            total_steps=_optional_int(own, "total_steps"),
            seed=seed,
            recipe=None if recipe is None else recipe.name,
        )

    def follows_progress(self) -> bool:
        """Whether an option needs the run's length (the anneal schedule, as in `positive_schedule`)."""
        return follows_progress(self.replay.options)


def verl_root(node: Any) -> Any:
    """The whole verl config a sampler_kwargs node belongs to (None for a plain dict)."""
    get_root = getattr(node, "_get_root", None)
    root = get_root() if callable(get_root) else None
    return None if root is None or root is node else root


def run_length(root: Any, updates_per_step: int = 1) -> int | None:
    """The run's steps: `trainer.total_training_steps` where the user set it, else what verl's
    trainer derives from the data and writes into the actor's optimizer config (in optimizer
    updates, `parameter_sync_step` of them a step) after the sampler is built."""
    steps = _plain_int(lookup(root, "trainer.total_training_steps"))
    if steps:
        return steps
    updates = _plain_int(lookup(root, "actor_rollout_ref.actor.optim.total_training_steps"))
    if not updates or updates < 0:
        return None
    return max(1, updates // max(1, updates_per_step))


def _plain_int(value: Any) -> int | None:
    return None if value is None or isinstance(value, bool) else int(value)


def measured_mu_problems(trainer_mode: str, method: str, settings: Any) -> list[str]:
    """A method that decides from the measured μ needs verl's sync mode, where a step waits for
    its own rollouts; in the async modes generation overlaps training and nothing measures it."""
    if trainer_mode == "sync" or not reads_measured_mu(method, settings):
        return []
    return [
        f"sampler_kwargs.mu: method {method!r} decides from the measured μ, and in verl's "
        f"{trainer_mode} mode generation overlaps training, so the trainer cannot measure it; "
        "give the μ to plan for (generation cost per rollout ÷ training cost per row on your "
        "hardware)"
    ]
