"""The registry of replay methods and method options: names → classes, and what `llm-replay
methods` prints.

A method module registers its class with `@register`; an option module with `@register_option`.
`llm_replay.methods` imports every module of the package, so a new method is one new module: the
config loader, the CLI listing and every runtime find it here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from llm_replay.methods.base import MethodOption, ReplayMethod

METHODS: dict[str, type[ReplayMethod[Any]]] = {}
OPTIONS: dict[str, type[MethodOption[Any]]] = {}

MethodT = TypeVar("MethodT", bound="type[ReplayMethod[Any]]")
OptionT = TypeVar("OptionT", bound="type[MethodOption[Any]]")


def _check_name(kind: str, name: str, taken: dict[str, Any], other: dict[str, Any]) -> None:
    if not name.isidentifier() or name == "method":
        raise ValueError(f"{kind} name {name!r}: must be an identifier other than 'method'")
    if name in taken or name in other:
        raise ValueError(f"{kind} name {name!r} is already registered")


def register(cls: MethodT) -> MethodT:
    """Class decorator: make a `ReplayMethod` available as `replay.method: <cls.name>`."""
    _check_name("method", cls.name, METHODS, OPTIONS)
    for attribute in ("description", "paper"):
        if not getattr(cls, attribute, ""):
            raise ValueError(f"method {cls.name!r}: set a non-empty `{attribute}`")
    METHODS[cls.name] = cls
    return cls


def register_option(cls: OptionT) -> OptionT:
    """Class decorator: make a `MethodOption` available as `replay.<cls.name>: {...}`."""
    _check_name("option", cls.name, OPTIONS, METHODS)
    OPTIONS[cls.name] = cls
    return cls


def method_class(name: str) -> type[ReplayMethod[Any]]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"method {name!r}: choose one of {sorted(METHODS)}") from None


def _knobs(config_cls: type) -> list[dict[str, Any]]:
    default = config_cls()
    return [
        {
            "name": f.name,
            "default": getattr(default, f.name),
            "type": str(f.type),
            "help": f.metadata.get("help", ""),
        }
        for f in dataclasses.fields(config_cls)
    ]


def describe() -> list[dict[str, Any]]:
    """Every registered method, then every option: what `llm-replay methods --json` prints."""
    out: list[dict[str, Any]] = []
    for name in sorted(METHODS):
        cls = METHODS[name]
        refusal = cls.async_refusal(cls.Config())
        out.append(
            {
                "name": name,
                "kind": "method",
                "description": cls.description,
                "paper": cls.paper,
                "supports_async": refusal is None,
                "async_note": refusal or cls.async_note(cls.Config()),
                "knobs": _knobs(cls.Config),
            }
        )
    for name in sorted(OPTIONS):
        option = OPTIONS[name]
        out.append(
            {
                "name": name,
                "kind": "option",
                "description": option.description,
                "paper": option.paper,
                "supports_async": True,
                "async_note": "applied to each fresh round before the method sees it",
                "applies_to": [m for m in sorted(METHODS) if option.refusal(METHODS[m]) is None],
                "knobs": _knobs(option.Config),
            }
        )
    return out
