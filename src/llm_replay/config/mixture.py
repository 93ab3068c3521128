"""`task.kind: mixture`: the members of a task mixture, read and checked at load time.

`task.members` maps a member's name to its weight and its task: a built-in task by name
(`gcd: {weight: 1}`, or `sums: {weight: 2, task: chain_sum}`), or a reasoning-gym spec
(`{weight: 1, dataset: ..., params: ..., prompt_template: ..., strip_spaces: ...,
answer_tokens: ...}`), each with its own prompt template and answer length as the built-in tasks
carry them. Everything that can be checked without building the datasets is checked here, each
error naming its dotted field; a template field the dataset lacks or an unknown reasoning-gym
dataset is found when the task is built (`tasks.mixture`), still before training starts.

Simplifications: members are reasoning-gym generators only (no dataset files yet), and every
member shares the mixture's seeds, eval share and correct threshold.
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_replay.buffer.task_parts import TaskParts
from llm_replay.checks import integer
from llm_replay.config.parse import ConfigError, did_you_mean, setting
from llm_replay.tasks.builtin import ANSWER_TOKENS, BUILTIN_TASKS
from llm_replay.tasks.mixture import MemberSpec

MEMBER_KEYS = (
    "weight",
    "task",
    "dataset",
    "params",
    "prompt_template",
    "strip_spaces",
    "answer_tokens",
)

SINGLE_TASK_FIELDS = (
    "dataset",
    "params",
    "prompt_template",
    "strip_spaces",
    "path",
    "eval_path",
    "prompt_field",
    "answer_field",
)
"""The `task.*` fields a mixture ignores (each member carries its own); a value other than the
default is refused rather than silently dropped."""


def parse_members(members: Mapping[Any, Any], prefix: str = "members") -> tuple[MemberSpec, ...]:
    """The mixture's members in their written order; a ConfigError names the first bad field."""
    if not members:
        raise ConfigError(
            f"{prefix} = {{}}: kind 'mixture' needs at least one member, e.g. "
            "members: {gcd: {weight: 1}, products: {weight: 1}}"
        )
    return tuple(_member(name, spec, prefix) for name, spec in members.items())


def _member(name: Any, spec: Any, prefix: str) -> MemberSpec:
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise ConfigError(
            f"{prefix}: member name {name!r} must be a non-empty string without '/' or spaces "
            "at its ends (it names the member's metrics, eval/NAME/accuracy)"
        )
    key = f"{prefix}.{name}"
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"{key} = {spec!r}: expected a mapping {{weight, and task: BUILTIN or dataset: ...}}"
        )
    for field_name in spec:
        if field_name not in MEMBER_KEYS:
            hint = did_you_mean(field_name, MEMBER_KEYS)
            raise ConfigError(f"{key}.{field_name}: unknown member key{hint}")
    weight = spec.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise ConfigError(f"{key}.weight = {weight!r}: expected a number")
    if not math.isfinite(weight) or weight <= 0:
        raise ConfigError(f"{key}.weight = {weight!r}: must be finite and > 0")
    if "task" in spec and "dataset" in spec:
        raise ConfigError(
            f"{key}: task = {spec['task']!r} and dataset = {spec['dataset']!r}: give one "
            "(a built-in task by name, or a reasoning-gym dataset)"
        )
    values: dict[str, Any]
    if "dataset" in spec:
        dataset = spec["dataset"]
        if not isinstance(dataset, str) or not dataset:
            raise ConfigError(f"{key}.dataset = {dataset!r}: expected a reasoning-gym name")
        values = {"dataset": dataset}
    else:
        builtin = spec.get("task", name)
        if builtin not in BUILTIN_TASKS:
            where = f"{key}.task" if "task" in spec else key
            raise ConfigError(
                f"{where} = {builtin!r}: not a built-in task"
                + did_you_mean(builtin, BUILTIN_TASKS)
                + " (name one with task:, or give a reasoning-gym dataset:)"
            )
        base = BUILTIN_TASKS[builtin]
        values = {
            "dataset": base["dataset"],
            "params": dict(base["params"]),
            "prompt_template": base["prompt_template"],
            "strip_spaces": base["strip_spaces"],
            "answer_tokens": ANSWER_TOKENS.get(builtin),
        }
    if "params" in spec:
        if not isinstance(spec["params"], Mapping):
            raise ConfigError(f"{key}.params = {spec['params']!r}: expected a mapping")
        values["params"] = dict(spec["params"])
    if "prompt_template" in spec:
        values["prompt_template"] = _template(f"{key}.prompt_template", spec["prompt_template"])
    if "strip_spaces" in spec:
        if not isinstance(spec["strip_spaces"], bool):
            raise ConfigError(f"{key}.strip_spaces = {spec['strip_spaces']!r}: expected a bool")
        values["strip_spaces"] = spec["strip_spaces"]
    if "answer_tokens" in spec:
        values["answer_tokens"] = integer(
            f"{key}.answer_tokens", spec["answer_tokens"], minimum=1, error=ConfigError
        )
    return MemberSpec(name=name, weight=float(weight), **values)


def _template(key: str, template: Any) -> str:
    if not isinstance(template, str):
        raise ConfigError(f"{key} = {template!r}: expected a string")
    try:
        list(string.Formatter().parse(template))
    except ValueError as error:
        raise ConfigError(f"{key} = {template!r}: not a format string ({error})") from None
    return template


def check_mixture_fields(task: Any, defaults: Any) -> None:
    """Refuse `task.*` single-task fields a mixture would ignore, and `members` off a mixture."""
    if task.kind != "mixture":
        if task.members:
            raise ConfigError(
                f"members: read only with kind = 'mixture' (kind is {task.kind!r}); set "
                "kind: mixture or remove members"
            )
        return
    for name in SINGLE_TASK_FIELDS:
        value = getattr(task, name)
        if value != getattr(defaults, name):
            raise ConfigError(
                f"{name} = {value!r}: a single-task field, ignored by kind 'mixture'; set it "
                "per member under task.members.NAME"
            )


@dataclass
class ReplayTasksConfig:
    """`replay.tasks:` the replay table's per-task parts, for a run on a mixture of tasks."""

    balance: bool = setting(
        False, "draw a task uniformly among those stored, then a row within it (TaskBalanced)"
    )
    capacity: bool = setting(
        False, "hold each of the k stored tasks to N/k rows of the table, oldest first"
    )

    def check(self) -> None:
        pass

    def parts(self) -> TaskParts | None:
        """The table parts, or None when neither is on."""
        parts = TaskParts(balance=self.balance, capacity=self.capacity)
        return parts if parts.active else None
