"""Every config field with its type, default and help, for `llm-replay fields`, the generated
configuration reference and the test that no field goes without help.

The `algorithm` loss knobs and the `replay` method knobs and options come from their registries
(`llm-replay losses`, `llm-replay methods`) and are described there.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

REGISTRY_FIELDS = {"algorithm.loss_settings", "replay.settings", "replay.options"}


@dataclass(frozen=True)
class FieldHelp:
    name: str  # dotted, e.g. "generation.temperature"
    type: str
    default: Any
    help: str


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        return None if dataclasses.is_dataclass(value) else value
    return None


def _type_name(kind: Any) -> str:
    name = getattr(kind, "__name__", None)
    return (
        name if isinstance(name, str) and "[" not in str(kind) else str(kind).replace("typing.", "")
    )


def fields_of(cls: type, prefix: str = "") -> list[FieldHelp]:
    """The leaf fields of a config dataclass, nested sections flattened to dotted names."""
    out: list[FieldHelp] = []
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        name = f"{prefix}{field.name}"
        if name in REGISTRY_FIELDS:
            continue
        kind = hints.get(field.name, field.type)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            out += fields_of(kind, f"{name}.")
            continue
        help_text = str(field.metadata.get("help", ""))
        out.append(FieldHelp(name, _type_name(kind), _default(field), help_text))
    return out


def config_fields() -> list[FieldHelp]:
    """Every field of a run's config (`llm_replay.config.Config`)."""
    from llm_replay.config import Config

    return fields_of(Config)
