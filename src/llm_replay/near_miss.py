"""The one near-miss rule for every name a user types (a config key, a preset, a method, a task,
an experiment's row, a member of a mixture): the nearest choice, and the tail of an error that
names it. A leaf module, so the lowest layers (models, tasks) use the same rule as the config
without importing it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: object, choices: Iterable[str]) -> str | None:
    """The choice nearest a mistyped name (`difflib`'s close match), or None when none is near:
    the one near-miss rule for every name a user types (a config key, a preset, a method, a
    task, an experiment's row)."""
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return close[0] if close else None


def did_you_mean(word: object, choices: Iterable[str], *, prefix: str = "") -> str:
    """`; did you mean 'PREFIX+CHOICE'?` for `closest(word, choices)`, or '' when none is near:
    the tail of a one-line error about a name."""
    close = closest(word, choices)
    return "" if close is None else f"; did you mean {prefix + close!r}?"
