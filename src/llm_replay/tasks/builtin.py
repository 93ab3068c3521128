"""The built-in task: reasoning-gym `chain_sum` with 2–3 terms of 1–2 digits, as `98+93-77=`.

The shipped tiny model was warm-started on this task's train split; presets default to it.
"""

from __future__ import annotations

from typing import Any

from llm_replay.tasks.reasoning_gym import ReasoningGymTask

CHAIN_SUM: dict[str, Any] = {
    "dataset": "chain_sum",
    "params": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
    "prompt_template": "{expression}=",
    "strip_spaces": True,
    "seed": 1,
    "eval_seed": 2,
}


def chain_sum_task(train_size: int = 20_000, eval_size: int = 500) -> ReasoningGymTask:
    spec = dict(CHAIN_SUM)
    return ReasoningGymTask(spec.pop("dataset"), train_size=train_size, eval_size=eval_size, **spec)
