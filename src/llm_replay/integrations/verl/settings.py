"""`trainer.v1.sampler.sampler_kwargs`: the replay method, its knobs, and the sampler's own few.

Every key that is not one of the sampler's own (`SAMPLER_KEYS`) goes to llm-replay's method
registry exactly as under `replay:` in an llm-replay config, so a wrong knob fails when verl
builds the sampler, before a model is loaded, and the error names it
(`sampler_kwargs.delta = 2: must be in [0, 1]`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_replay.algorithms.advantages import ADVANTAGES
from llm_replay.checks import boolean, integer, number
from llm_replay.config import ReplayConfig
from llm_replay.config.parse import ConfigError
from llm_replay.frontend.settings import (
    as_mapping,
    default_advantage,
    lookup_int,
    refuse_beyond_replay,
    refuse_rescoring,
    refuse_step_resizing,
    resolve_method,
)
from llm_replay.integrations.verl.startup import PREFIX
from llm_replay.integrations.verl.startup import startup_problems as startup_problems
from llm_replay.methods.host import follows_progress

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
NOT_RUN = (
    "verl's trainer (the rollout, the mini-batch and the loss's token terms are verl's own; "
    "docs/verl.md)"
)


def _optional_int(data: dict[str, Any], name: str) -> int | None:
    value = data.get(name)
    return (
        None if value is None else integer(f"{PREFIX}.{name}", value, minimum=1, error=ConfigError)
    )


@dataclass(frozen=True)
class SamplerSettings:
    replay: ReplayConfig
    correct_threshold: float = 1.0  # a trajectory whose summed rm_scores reach this is a success
    advantage: str = (
        "grpo"  # how a fresh group's advantages are computed (grpo | dr_grpo | rloo | optimal)
    )
    sampling_weights: bool = False  # scale each drawn row's advantage by its importance weight
    checkpoint_dir: str | None = None  # verl's trainer.default_local_dir, for resuming
    group_size: int | None = None  # rollout.n (else read from verl's config, else the data)
    mini_batch_prompts: int | None = None  # actor.ppo_mini_batch_size (else verl's config)
    total_steps: int | None = None  # for methods that follow the run's progress
    seed: int = 0
    recipe: str | None = None  # the recipe `method` named (`positive_schedule`), resolved

    @classmethod
    def from_kwargs(cls, sampler_kwargs: Any) -> SamplerSettings:
        data = as_mapping(sampler_kwargs, PREFIX)
        own = {k: data.pop(k) for k in SAMPLER_KEYS if k in data}
        if "method" not in data:
            raise ConfigError(f"{PREFIX}.method: name a replay method (`llm-replay methods`)")
        if data.get("init_from") is not None:
            raise ConfigError(
                f"{PREFIX}.init_from: a table filled outside verl has no verl trajectories to "
                "replay; start from an empty table"
            )
        replay, recipe = resolve_method(
            data["method"], data, PREFIX, method_field=f"{PREFIX}.method"
        )
        refuse_beyond_replay(recipe, f"{PREFIX}.method", NOT_RUN)
        refuse_rescoring(replay.options, PREFIX, "verl's trainer")
        refuse_step_resizing(replay.options, PREFIX, "verl's trainer")
        threshold = number(
            f"{PREFIX}.correct_threshold", own.get("correct_threshold", 1.0), error=ConfigError
        )
        advantage = own.get("advantage", default_advantage(recipe))
        if advantage not in ADVANTAGES:
            raise ConfigError(
                f"{PREFIX}.advantage = {advantage!r}: choose one of {sorted(ADVANTAGES)}"
            )
        directory = own.get("checkpoint_dir")
        if directory is not None and not isinstance(directory, str):
            raise ConfigError(f"{PREFIX}.checkpoint_dir = {directory!r}: must be a path")
        return cls(
            replay=replay,
            correct_threshold=threshold,
            advantage=advantage,
            sampling_weights=boolean(
                f"{PREFIX}.sampling_weights", own.get("sampling_weights", False), error=ConfigError
            ),
            checkpoint_dir=directory,
            group_size=_optional_int(own, "group_size"),
            mini_batch_prompts=_optional_int(own, "mini_batch_prompts"),
            total_steps=_optional_int(own, "total_steps"),
            seed=integer(f"{PREFIX}.seed", own.get("seed", 0), minimum=0, error=ConfigError),
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
    steps = lookup_int(root, "trainer.total_training_steps")
    if steps:
        return steps
    updates = lookup_int(root, "actor_rollout_ref.actor.optim.total_training_steps")
    if not updates or updates < 0:
        return None
    return max(1, updates // max(1, updates_per_step))
