"""The built-in tasks, each with a tiny model warm-started on its train split and shipped with us.

- `chain_sum`: reasoning-gym `chain_sum` with 2–3 terms of 1–2 digits, as `98+93-77=`; answers
  are 1–4 characters. Model: `builtin:tiny-chain-sum`; the presets default to it.
- `spell_backward`: reasoning-gym `spell_backward` with 3–8 letter words, as `splat<`; the answer
  is the word reversed (`talps`), 3–8 characters, so generation is a larger share of an
  iteration's cost. Partial credit for a correct prefix; a rollout is correct at reward 1.
  Model: `builtin:tiny-spell-backward`.

Each spec holds the `task:` config fields; `scripts/build_tiny_model.py --task NAME` builds the
model from the same spec, so the model's warm-start data and a run's train split are one thing.
"""

from __future__ import annotations

from typing import Any

from llm_replay.tasks.base import TaskError
from llm_replay.tasks.reasoning_gym import ReasoningGymTask

CHAIN_SUM: dict[str, Any] = {
    "dataset": "chain_sum",
    "params": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
    "prompt_template": "{expression}=",
    "strip_spaces": True,
    "seed": 1,
    "eval_seed": 2,
}

SPELL_BACKWARD: dict[str, Any] = {
    "dataset": "spell_backward",
    "params": {"min_word_len": 3, "max_word_len": 8},
    "prompt_template": "{word}<",
    "strip_spaces": True,
    "seed": 1,
    "eval_seed": 2,
}

BUILTIN_TASKS: dict[str, dict[str, Any]] = {
    "chain_sum": CHAIN_SUM,
    "spell_backward": SPELL_BACKWARD,
}


def builtin_task(name: str, train_size: int = 20_000, eval_size: int = 500) -> ReasoningGymTask:
    if name not in BUILTIN_TASKS:
        raise TaskError(
            f"task = {name!r}: not a built-in task; choose from {sorted(BUILTIN_TASKS)}"
        )
    spec = dict(BUILTIN_TASKS[name])
    return ReasoningGymTask(spec.pop("dataset"), train_size=train_size, eval_size=eval_size, **spec)


def chain_sum_task(train_size: int = 20_000, eval_size: int = 500) -> ReasoningGymTask:
    return builtin_task("chain_sum", train_size, eval_size)
