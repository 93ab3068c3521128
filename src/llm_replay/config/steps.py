"""`train.steps_per_round`: the gradient step as a share of a round, resolved when a config is read.

`train.batch_size` is a count of rollouts, so "two gradient steps a round" written as
`batch_size: 128` holds only for a round of 256 (the built-in 32 prompts × 8 completions): on a
round of 512 it is four steps, on one of 64 a step every second round (issue #53, where two steps a
round became the setting read against a tuned on-policy). `steps_per_round: k` says the intent
instead. It is resolved as recipes are, when the config is read, into the step it means: the
round's rollouts (`generation.prompts_per_step` × `generation.group_size`, the full round before
adaptive rollouts end any prompt early) divided by k, written to `train.batch_size`, with
`train.micro_batch_size` held to at most that step. The resolved config, and so every saved
protocol, records that step size, and `steps_per_round` as set.

The step counts rows of the credit each round earns (y × the round's rollouts): on-policy trains k
steps a round, replay at y = 2 trains 2k. A `train.batch_size` of its own beside it is refused
unless it is the step `steps_per_round` makes (the default, 256, stands for "not set").
"""

from __future__ import annotations

from typing import Any

from llm_replay.checks import integer
from llm_replay.config.parse import ConfigError
from llm_replay.config.sections import GenerationConfig, TrainConfig

FIELD = "train.steps_per_round"
TRAIN_DEFAULTS = TrainConfig()
"""`train`'s defaults: a `batch_size` left at its default (256) is a step nobody sized."""


def sizes_step(train: dict[str, Any]) -> bool:
    """Whether a `train` mapping sizes the gradient step itself: `steps_per_round`, or a
    `batch_size` other than the default (a recipe's steps a round go under neither)."""
    return (
        "steps_per_round" in train
        or train.get("batch_size", TRAIN_DEFAULTS.batch_size) != TRAIN_DEFAULTS.batch_size
    )


def _count(section: dict[str, Any], key: str, default: int, where: str) -> int:
    return integer(f"{where}.{key}", section.get(key, default), minimum=1, error=ConfigError)


def resolve_steps(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a whole config mapping) with `train.steps_per_round` turned into the gradient step
    it means; a mapping without it comes back as it is."""
    train = data.get("train")
    if not isinstance(train, dict) or train.get("steps_per_round") is None:
        return data
    steps = _count(train, "steps_per_round", 1, "train")
    generation = data.get("generation") or {}
    if not isinstance(generation, dict):
        return data  # the generation section's own check names it
    defaults = GenerationConfig()
    prompts = _count(generation, "prompts_per_step", defaults.prompts_per_step, "generation")
    group = _count(generation, "group_size", defaults.group_size, "generation")
    rollouts = prompts * group
    if rollouts % steps:
        raise ConfigError(
            f"{FIELD} = {steps}: must divide a round's rollouts (generation.prompts_per_step × "
            f"group_size = {prompts} × {group} = {rollouts}); "
            f"{_dividing(rollouts, steps)}"
        )
    step = rollouts // steps
    given = train.get("batch_size", TRAIN_DEFAULTS.batch_size)
    if given not in (TRAIN_DEFAULTS.batch_size, step):
        raise ConfigError(
            f"train.batch_size = {given!r}: not with {FIELD} = {steps}, which makes the step "
            f"{rollouts} / {steps} = {step} rollouts; set one of the two"
        )
    micro = train.get("micro_batch_size", TRAIN_DEFAULTS.micro_batch_size)
    resolved = {**train, "batch_size": step}
    if isinstance(micro, int) and not isinstance(micro, bool) and micro > step:
        resolved["micro_batch_size"] = step
    return {**data, "train": resolved}


def _dividing(rollouts: int, steps: int) -> str:
    """The step counts nearest `steps` that divide a round of `rollouts`."""
    below = next((k for k in range(steps - 1, 0, -1) if rollouts % k == 0), None)
    above = next((k for k in range(steps + 1, rollouts + 1) if rollouts % k == 0), None)
    fits = [str(k) for k in (below, above) if k is not None]
    return f"{' or '.join(fits)} would"
