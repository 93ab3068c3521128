"""The command line, `llm-replay train | eval | compare | report | methods | losses | inspect |
rescore | demo` (`commands.py`), the `inspect` report of a saved table (`inspect_table.py`) and
the demo (`demo.py`). Progress bars and summary tables live below it, in `llm_replay.terminal`,
which the experiment tools and the TRL runner share; nothing outside `cli/` imports `cli`.

`main` is imported when called, so that `import llm_replay.cli` stays light.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """The `llm-replay` command (see `cli.commands`)."""
    from llm_replay.cli.commands import main as run

    return run(argv)


__all__ = ["main"]
