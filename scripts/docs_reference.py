"""mkdocs hook: the Reference pages, generated from the code at build time so they cannot drift.

`mkdocs.yml` lists this file under `hooks:`; `on_files` adds four pages that exist only in the
built site: the CLI (each command's `--help`), the configuration (every field of every section,
with its type, default and help), and the methods, options and losses (from their registries).
"""

from __future__ import annotations

import argparse
from typing import Any

from mkdocs.structure.files import File, Files

from llm_replay.algorithms.losses import describe_losses
from llm_replay.algorithms.losses.pairs import describe_pair_losses
from llm_replay.cli.commands import build_parser
from llm_replay.config.describe import config_fields
from llm_replay.config.recipes import RECIPES
from llm_replay.methods import describe


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


def config_page() -> str:
    lines = [
        "# Configuration",
        "",
        "Every field of a run's YAML config, with its type, default and help (generated from "
        "the dataclasses in `llm_replay.config`; `llm-replay fields [PREFIX]` prints the same). "
        "`--set section.field=value` overrides one from the command line. The loss's knobs sit "
        "beside `algorithm.loss` ([losses](losses.md)), the method's beside `replay.method` "
        "([methods and options](methods.md)).",
        "",
    ]
    section = None
    for f in config_fields():
        head = f.name.split(".", 1)[0] if "." in f.name else "(top level)"
        if head != section:
            section = head
            lines += [
                "",
                f"## `{head}`",
                "",
                "| field | type | default | help |",
                "|---|---|---|---|",
            ]
        lines.append(f"| `{f.name}` | {_cell(f.type)} | `{_cell(f.default)}` | {_cell(f.help)} |")
    return "\n".join(lines)


def methods_page() -> str:
    lines = [
        "# Methods and options",
        "",
        "The replay methods and method options of the registry (`llm-replay methods`), each "
        "with its paper and knobs. A method's knobs sit under `replay:` beside `replay.method`; "
        "an option's under `replay.<option>:`. A recipe names a whole setup and is resolved "
        "into its parts when the config is read.",
        "",
    ]
    for recipe in RECIPES.values():
        lines += [f"## `{recipe.name}` (recipe)", "", _cell(recipe.description), ""]
        lines += [f"*Evidence*: {_cell(recipe.evidence)}", ""]
        lines += ["| setting | value |", "|---|---|"]
        lines += [f"| `{name}` | `{_cell(value)}` |" for name, value in recipe.parts()]
        lines.append("")
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
    pair_heading = [
        "# Pair losses",
        "",
        "The losses of a preference run (`preference.enabled: true`; `preference.loss` names one, "
        "[Preference learning with replay](../preference.md)): each a function of the implicit "
        "reward margin h of a pair (chosen, rejected) against the reference log-probs stored "
        "when the pair was made.",
        "",
    ]
    for entries, heading in ((describe_losses(), []), (describe_pair_losses(), pair_heading)):
        lines += heading
        for entry in entries:
            lines += [f"## `{entry['name']}`", "", _cell(entry["description"]), ""]
            lines += [f"*Paper*: {_cell(entry['paper'])}", ""]
            if entry["advantage"]:
                lines += [f"*Advantage it expects*: `{entry['advantage']}`", ""]
            lines += _knob_table(entry["knobs"])  # type: ignore[arg-type]
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
