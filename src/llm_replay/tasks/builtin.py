"""The built-in tasks, each with a tiny model warm-started on its train split and shipped with us.

- `chain_sum`: reasoning-gym `chain_sum` with 2–3 terms of 1–2 digits, as `98+93-77=`; answers
  are 1–4 characters. Model: `builtin:tiny-chain-sum`; the presets default to it.
- `spell_backward`: reasoning-gym `spell_backward` with 3–8 letter words, as `splat<`; the answer
  is the word reversed (`talps`), 3–8 characters, so generation is a larger share of an
  iteration's cost. Partial credit for a correct prefix; a rollout is correct at reward 1.
  Model: `builtin:tiny-spell-backward`.

The suite (issue #38), tasks of other kinds to choose a default on, each with its own tiny model
(`builtin:tiny-<name with dashes>`) SFT'd until it starts near 20% greedy accuracy
(`scripts/build_tiny_model.py --task NAME --stop-at 0.2`):

- `count_bits` (counting): the number of 1 bits of n ≤ 1023, as `245#` → `6`.
- `letter_counting` (counting over text): how often a letter occurs in three to six words, as
  `h:['hundred']=` → `1`.
- `gcd` (arithmetic beyond sums): the greatest common divisor of two numbers ≤ 99, as
  `gcd[98,58]=` → `2`.
- `products` (arithmetic beyond sums): a product of two numbers of 1–2 digits, as `47*8=` → `376`.
- `binary_alternation` (algorithmic): the fewest swaps that make a short bit string alternate,
  or -1, as `0010011?` → `2`.
- `lcm` (arithmetic beyond sums): the least common multiple of two numbers ≤ 20, as `lcm[20,4]=`
  → `20`.

Held out (`HELD_OUT_TASKS`): tasks no default was chosen on, added after `auto` was fixed to check
that it transfers (issue #38), with models built the same way:

- `simple_equations` (algebra): solve a linear equation in two or three terms for its unknown,
  whose value is 1–9 (the constants are larger), as `8*t-9=23:` → `4`.
- `count_primes` (number theory, counting): how many primes lie in a range within 1–100, as
  `16,53#` → `10`.
- `palindrome_generation` (construction with several right answers, issue #53): a palindrome that
  uses exactly the given 3–7 letters, as `['g','g','j','j','w']>` → `gjwjg` or `jgwgj`; every
  arrangement that reads the same both ways scores, so pass@k can gain from diversity where the
  suite's other tasks each have one right answer. Added after `auto` and the #53 sweep were fixed.
- `countdown` (search with many right answers, issue #53): reach a target of 1–30 from three
  numbers of 1–9 with `+`, `-` and `*`, each number used once, as `[4,7,8]>11=` → `8+7-4` or
  `7-4+8` (about four right expressions a problem, from one to ten). #53 reported `auto`
  trailing on-policy on a task of this kind; added to read that and the anneal's guard there.
- `number_sequence` (pattern induction, issue #53): the next term of four or five integers made by
  a rule of one or two steps, as `10,10,20,30,50,?` → `80` (add the previous term) or `5,2,1,0,?`
  → `0` (halve); the only task that asks for a rule found from examples. Added after #53's work
  was done, to read the shipped `auto` on a kind nobody tuned on.

`PENDING_TASKS` holds two more (`base_conversion`, algorithmic; `caesar_cipher`, string
manipulation) whose models are not shipped yet.

Each spec holds the `task:` config fields; `scripts/build_tiny_model.py --task NAME` builds the
model from the same spec, so the model's warm-start data and a run's train split are one thing.
`ANSWER_TOKENS` is each task's `generation.max_new_tokens`: its longest answer plus EOS and slack.
"""

from __future__ import annotations

import json
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


def _suite_task(dataset: str, params: dict[str, Any], template: str) -> dict[str, Any]:
    return {
        "dataset": dataset,
        "params": params,
        "prompt_template": template,
        "strip_spaces": True,
        "seed": 1,
        "eval_seed": 2,
    }


SUITE_TASKS: dict[str, dict[str, Any]] = {
    "count_bits": _suite_task("count_bits", {"min_n": 1, "max_n": 1023}, "{n}#"),
    "letter_counting": _suite_task(
        "letter_counting", {"min_words": 3, "max_words": 6}, "{target_letter}:{span}="
    ),
    "gcd": _suite_task("gcd", {"min_value": 1, "max_value": 99}, "gcd{numbers}="),
    "products": _suite_task(
        "products",
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
        "{expression}=",
    ),
    "binary_alternation": _suite_task("binary_alternation", {"min_n": 6, "max_n": 12}, "{string}?"),
    "lcm": _suite_task("lcm", {"min_value": 1, "max_value": 20}, "lcm{numbers}="),
}

HELD_OUT_TASKS: dict[str, dict[str, Any]] = {  # never used to choose a default
    "simple_equations": _suite_task(
        "simple_equations",
        {"min_terms": 2, "max_terms": 3, "min_value": 1, "max_value": 9},
        "{equation}:",
    ),
    "count_primes": _suite_task("count_primes", {"min_n": 1, "max_n": 100}, "{start},{end}#"),
    "palindrome_generation": _suite_task(
        "palindrome_generation", {"min_length": 3, "max_length": 7}, "{letters}>"
    ),
    "countdown": _suite_task(
        "countdown",
        {
            "min_numbers": 3,
            "max_numbers": 3,
            "min_value": 1,
            "max_value": 9,
            "min_target": 1,
            "max_target": 30,
            "operators": ["+", "-", "*"],
        },
        "{numbers}>{target}=",
    ),
    "number_sequence": _suite_task(
        "number_sequence",
        {"min_terms": 4, "max_terms": 5, "min_value": -20, "max_value": 20, "max_complexity": 2},
        "{question}",
    ),
}

PENDING_TASKS: dict[str, dict[str, Any]] = {  # specs whose models are not shipped yet
    "base_conversion": _suite_task(
        "base_conversion",
        {"min_base": 2, "max_base": 10, "min_value": 0, "max_value": 255},
        "{source_repr}_{source_base}>{target_base}=",
    ),
    "caesar_cipher": _suite_task(
        "caesar_cipher",
        {"min_words": 1, "max_words": 1, "min_rotation": 1, "max_rotation": 3},
        "{rotation}:{cipher_text}>",
    ),
}
"""Suite tasks whose tiny model has not reached its starting accuracy yet (SFT on them is slow):
`scripts/build_tiny_model.py` builds from these specs too, and each joins `SUITE_TASKS` when its
model ships."""

BUILTIN_TASKS: dict[str, dict[str, Any]] = {
    "chain_sum": CHAIN_SUM,
    "spell_backward": SPELL_BACKWARD,
    **SUITE_TASKS,
    **HELD_OUT_TASKS,
}

ANSWER_TOKENS: dict[str, int] = {
    "chain_sum": 8,
    "spell_backward": 10,
    "count_bits": 4,
    "letter_counting": 4,
    "base_conversion": 10,
    "gcd": 4,
    "products": 6,
    "caesar_cipher": 16,
    "binary_alternation": 4,
    "lcm": 5,
    "simple_equations": 5,
    "count_primes": 4,
    "palindrome_generation": 10,
    "countdown": 10,
    "number_sequence": 6,
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


def builtin_model(name: str) -> str:
    """The shipped model a built-in task starts from: `builtin:tiny-<name with dashes>`."""
    return "builtin:tiny-" + name.replace("_", "-")


def builtin_overrides(name: str) -> list[str]:
    """`--set` overrides that point any preset at built-in task `name` and its shipped model."""
    if name not in BUILTIN_TASKS:
        raise TaskError(
            f"task = {name!r}: not a built-in task; choose from {sorted(BUILTIN_TASKS)}"
        )
    spec = BUILTIN_TASKS[name]
    sets = [
        f"model.path={builtin_model(name)}",
        "task.kind=reasoning_gym",
        f"task.dataset={spec['dataset']}",
        f"task.params={json.dumps(spec['params'])}",
        f"task.prompt_template={json.dumps(spec['prompt_template'])}",
        f"generation.max_new_tokens={ANSWER_TOKENS[name]}",
    ]
    sets += [f"task.{key}={json.dumps(spec[key])}" for key in ("strip_spaces", "seed", "eval_seed")]
    return sets
