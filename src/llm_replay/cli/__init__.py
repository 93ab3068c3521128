"""The command line, `llm-replay train | eval | compare | report | methods | losses | inspect |
rescore | demo` (`commands.py`), and what it shows in a terminal: progress bars and summary tables
(`progress.py`), the `inspect` report of a saved table (`inspect_table.py`) and the demo
(`demo.py`). The library itself only logs.

`main` is imported when called, so that the terminal helpers (`cli.progress`, which the
experiment tools use) load without the whole command line.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """The `llm-replay` command (see `cli.commands`)."""
    from llm_replay.cli.commands import main as run

    return run(argv)


__all__ = ["main"]
