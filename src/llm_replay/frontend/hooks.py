"""Hearing a trainer's own steps without changing them: its bound methods, wrapped in place.

A trainer that keeps a step's statistics or its times to itself (verl's `_update_actor` writes
the actor's metrics into the step's log and nowhere else) can still feed a method's signals and
the μ meter: the front end wraps that method on the trainer instance, the trainer's code runs
unchanged, and a callback hears each call's arguments and how long it took.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

MARK = "__llm_replay_wrapped__"  # the keys a wrapper (and those under it) was made for

Heard = Callable[[tuple[Any, ...], dict[str, Any], float], None]


def wrap_method(owner: Any, name: str, heard: Heard, key: str = "heard") -> bool:
    """Replace `owner.name` by a wrapper that calls it and then, once it returned, `heard(args,
    kwargs, seconds)`. A front end names what it listens for (`key`): wrapping again under a key
    already there is a no-op (a front end built twice on one trainer hears each call once), under
    another key it wraps again. False where `owner` has no such callable; True where it is
    wrapped under `key`, now or before."""
    original = getattr(owner, name, None)
    if not callable(original):
        return False
    keys: frozenset[str] = getattr(original, MARK, frozenset())
    if key in keys:
        return True

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        out = original(*args, **kwargs)
        heard(args, kwargs, time.perf_counter() - started)
        return out

    setattr(wrapper, MARK, keys | {key})
    setattr(owner, name, wrapper)
    return True


def time_methods(owner: Any, names: Iterable[str], seconds: Callable[[float], None]) -> list[str]:
    """Wrap each of `owner`'s methods in `names` so that `seconds(s)` hears how long each call
    that returned took; returns the names wrapped (a missing method is skipped)."""
    return [
        name
        for name in names
        if wrap_method(owner, name, lambda _args, _kwargs, took: seconds(took), key="seconds")
    ]
