"""Typed dataclass configs from YAML mappings: conversion, unknown-key hints, dotted overrides.

Generic: nothing here knows the fields of `Config`. A dataclass field is built recursively and
its `check()` runs, with errors prefixed by the dotted key; a class with a `from_mapping(data,
prefix)` classmethod (the replay section, whose knobs come from the method registry) builds
itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from llm_replay import checks
from llm_replay.algorithms.losses import LossConfigError
from llm_replay.methods import MethodConfigError
from llm_replay.near_miss import closest as closest
from llm_replay.near_miss import did_you_mean as did_you_mean


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""


class _YAML12Loader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader with YAML 1.2's booleans: only true/false. Under YAML 1.1, `off`,
    `on`, `yes` and `no` become booleans, so `token_control: off` would arrive as False instead
    of the choice 'off'."""


_BOOL = "tag:yaml.org,2002:bool"
_YAML12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YAML12Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_yaml(text: str) -> Any:
    """Parse YAML with no code execution (safe) and YAML 1.2's booleans (`_YAML12Loader`)."""
    return yaml.load(text, Loader=_YAML12Loader)


def setting(
    default: Any = None, help: str = "", *, factory: typing.Callable[[], Any] | None = None
) -> Any:
    """A config field with its help: the one place `--help`, the configuration reference and the
    field-help test read it from. `factory` builds a mutable default."""
    metadata = {"help": help}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _help_of(cls: Any, name: str) -> str:
    for field in dataclasses.fields(cls):
        if field.name == name:
            return str(field.metadata.get("help", ""))
    return ""


def field_names(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", str(kind)).replace("typing.", "")


def _convert(key: str, kind: Any, value: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin is Literal:
        choices = list(typing.get_args(kind))
        if value not in choices:
            hint = did_you_mean(value, [str(c) for c in choices])
            raise ConfigError(f"{key} = {value!r}: choose one of {choices}{hint}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(kind)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(key, inner[0], value)
    if isinstance(kind, type) and hasattr(kind, "from_mapping"):  # a section that parses itself
        if not isinstance(value, dict):
            raise ConfigError(f"{key} = {value!r}: expected a mapping of {_type_name(kind)} fields")
        return kind.from_mapping(value, key)
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise ConfigError(f"{key} = {value!r}: expected a mapping of {_type_name(kind)} fields")
        return build(kind, value, key)
    if origin is list:
        (item,) = typing.get_args(kind)
        if not isinstance(value, list):
            raise ConfigError(f"{key} = {value!r}: expected a list")
        return [_convert(f"{key}[{i}]", item, v) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} = {value!r}: expected a mapping")
        return dict(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} = {value!r}: expected true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} = {value!r}: expected an integer")
        return value
    if kind is float:
        if isinstance(value, str):  # YAML 1.1 reads `1e-4` (no dot) as a string
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} = {value!r}: expected a number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} = {value!r}: expected a string")
        return value
    raise ConfigError(f"{key}: unsupported field type {_type_name(kind)}")  # pragma: no cover


def build(cls: Any, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = closest(key, names)
            hint = ""
            if close is not None:
                meant = (prefix + "." if prefix else "") + close
                text = _help_of(cls, close)
                hint = f"; did you mean {meant!r}" + (f" ({text})?" if text else "?")
            raise ConfigError(f"unknown key {dotted!r}{hint}")
        values[key] = _convert(dotted, hints[key], value)
    try:
        instance = cls(**values)  # a frozen knob class checks itself here
        instance.check()
    except (ConfigError, MethodConfigError, LossConfigError) as error:
        message = str(error)
        raise ConfigError(f"{prefix}.{message}" if prefix else message) from None
    return instance


def check_registry_knobs(
    prefix: str,
    keys: Iterable[str],
    *,
    chosen: str,
    kind: str,
    knobs_of: Mapping[str, set[str]],
    also: Iterable[str] = (),
) -> None:
    """A section whose knobs come from a registry (a method's under `replay`, a loss's under
    `algorithm`): each key must be a knob of the `chosen` entry. A knob of another entry is named
    with its owners; anything else is unknown, with the nearest knob (or `also`) as a hint."""
    own = knobs_of[chosen]
    for key in keys:
        if key in own:
            continue
        owners = sorted(name for name, knobs in knobs_of.items() if key in knobs)
        if owners:
            raise ConfigError(
                f"{prefix}.{key}: a knob of {owners}, not of {kind} {chosen!r} "
                f"(its knobs: {sorted(own) or 'none'})"
            )
        every = sorted(set().union(*knobs_of.values()) | set(also))
        hint = did_you_mean(key, every, prefix=prefix + ".")
        raise ConfigError(f"unknown key '{prefix}.{key}'{hint}")


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b=value` → (["a", "b"], YAML-parsed value)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(
            f"--set {text!r}: value is not valid YAML ({' '.join(str(problem).split())})"
        ) from None
    return parts, value


def yaml_error(path: Path, error: yaml.YAMLError) -> str:
    """One line: file:line:column: what the parser objected to."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "context", None) or str(error)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return f"{where}: not valid YAML ({' '.join(str(problem).split())})"


def deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [deep_copy(v) for v in data]
    return data


def check_positive(key: str, value: float, *, zero_ok: bool = False) -> None:
    """ConfigError naming `key` unless `value` is finite and > 0 (>= 0 with `zero_ok`)."""
    checks.positive(key, value, zero_ok=zero_ok, error=ConfigError)


REPLACED_WHOLE = {("task", "params"), ("task", "members")}
"""A dataset's parameters never mix with another's, nor a mixture's members with another's."""


def merged(
    base: dict[str, Any], top: dict[str, Any], where: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`top` over `base`: mappings merge key by key (except `REPLACED_WHOLE`), anything else in
    `top` replaces."""
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        at = (*where, str(key))
        if isinstance(below, dict) and isinstance(value, dict) and at not in REPLACED_WHOLE:
            out[key] = merged(below, value, at)
        else:
            out[key] = value
    return out
