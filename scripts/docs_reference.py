"""mkdocs hook: the Reference pages, generated from the code at build time so they cannot drift.

`mkdocs.yml` lists this file under `hooks:`; `on_files` adds four pages that exist only in the
built site: the CLI (each command's `--help`), the configuration (every field of every section,
with its type, default and help), and the methods, options and losses (from their registries).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from mkdocs.structure.files import File, Files

from llm_replay.algorithms.losses import describe_losses
from llm_replay.cli.commands import build_parser
from llm_replay.config import Config
from llm_replay.methods import describe

SKIP_SECTIONS = {"replay"}  # the replay section's knobs are the methods' own (methods.md)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def cli_page() -> str:
    parser = build_parser()
    lines = [
        "# CLI",
        "",
        "Every `llm-replay` command with its `--help` (generated from the parser).",
        "",
    ]
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in actions[0].choices.items():
        lines += [f"## `llm-replay {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        return None if dataclasses.is_dataclass(value) else value
    return None


def config_fields(cls: type, prefix: str) -> list[tuple[str, str, Any, str]]:
    """(dotted name, type, default, help) for every leaf field of a config dataclass."""
    out = []
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        name = f"{prefix}{field.name}"
        kind = hints.get(field.name, field.type)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            out += config_fields(kind, f"{name}.")
            continue
        label = getattr(kind, "__name__", None) or str(kind).replace("typing.", "")
        out.append((name, label, _default(field), field.metadata.get("help", "")))
    return out


def config_page() -> str:
    lines = [
        "# Configuration",
        "",
        "Every field of a run's YAML config, by section, with its type, default and help "
        "(generated from the dataclasses in `llm_replay.config`). `--set section.field=value` "
        "overrides one from the command line; the `replay` section's knobs are the method's own "
        "([methods and options](methods.md)).",
        "",
    ]
    hints = typing.get_type_hints(Config)
    for field in dataclasses.fields(Config):
        kind = hints[field.name]
        if field.name in SKIP_SECTIONS:
            continue
        if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
            lines += [f"- `{field.name}` (default `{_default(field)}`)", ""]
            continue
        lines += [
            f"## `{field.name}`",
            "",
            "| field | type | default | help |",
            "|---|---|---|---|",
        ]
        for name, label, default, text in config_fields(kind, f"{field.name}."):
            lines.append(f"| `{name}` | {_cell(label)} | `{_cell(default)}` | {_cell(text)} |")
        lines.append("")
    return "\n".join(lines)


def methods_page() -> str:
    lines = [
        "# Methods and options",
        "",
        "The replay methods and method options of the registry (`llm-replay methods`), each "
        "with its paper and knobs. A method's knobs sit under `replay:` beside `replay.method`; "
        "an option's under `replay.<option>:`.",
        "",
    ]
    for entry in describe():
        kind = "option" if entry["kind"] == "option" else "method"
        lines += [f"## `{entry['name']}` ({kind})", "", _cell(entry["description"]), ""]
        lines += [f"*Paper*: {_cell(entry['paper'])}", ""]
        if entry.get("applies_to"):
            lines += [f"*Applies to*: {', '.join(f'`{m}`' for m in entry['applies_to'])}", ""]
        lines += [f"*Asynchronous*: {_cell(entry.get('async_note', ''))}", ""]
        lines += _knob_table(entry["knobs"])
    return "\n".join(lines)


def losses_page() -> str:
    lines = [
        "# Losses",
        "",
        "The policy losses of the registry (`llm-replay losses`): `algorithm.loss` names one and "
        "its knobs sit beside it under `algorithm:`.",
        "",
    ]
    for entry in describe_losses():
        lines += [f"## `{entry['name']}`", "", _cell(entry["description"]), ""]
        lines += [f"*Paper*: {_cell(entry['paper'])}", ""]
        if entry["advantage"]:
            lines += [f"*Advantage it expects*: `{entry['advantage']}`", ""]
        lines += _knob_table(entry["knobs"])
    return "\n".join(lines)


def _knob_table(knobs: list[dict[str, Any]]) -> list[str]:
    if not knobs:
        return ["No knobs.", ""]
    rows = ["| knob | default | help |", "|---|---|---|"]
    rows += [f"| `{k['name']}` | `{_cell(k['default'])}` | {_cell(k['help'])} |" for k in knobs]
    return [*rows, ""]


PAGES = {
    "reference/cli.md": cli_page,
    "reference/config.md": config_page,
    "reference/methods.md": methods_page,
    "reference/losses.md": losses_page,
}


def on_files(files: Files, config: Any) -> Files:
    for path, build in PAGES.items():
        files.append(File.generated(config, path, content=build()))
    return files
