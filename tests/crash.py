"""SIGKILL at the k-th file-system step of a function, in a forked child (test helper).

Every call that changes or syncs the file system — opening a file for writing, mkdir, rename,
replace, unlink, rmdir, fsync — is a step. `kill_at_step(k, fn)` forks; the child counts steps and
SIGKILLs itself just before step k (no handler, no cleanup: what a crash leaves), or runs `fn` to
the end. `count_steps(fn)` runs it in a child with no kill and reports how many steps it took.
"""

from __future__ import annotations

import builtins
import io
import os
import signal
from collections.abc import Callable
from typing import Any

PATCHED = ("mkdir", "rename", "replace", "unlink", "rmdir", "fsync")


def _instrument(kill_at: int | None, counter: list[int]) -> None:
    def step() -> None:
        if kill_at is not None and counter[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        counter[0] += 1

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            step()
            return fn(*args, **kwargs)

        return wrapped

    for name in PATCHED:
        setattr(os, name, wrap(getattr(os, name)))
    real_open = io.open

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(flag in mode for flag in "wax+"):
            step()
        return real_open(file, mode, *args, **kwargs)

    builtins.open = io.open = open_  # type: ignore[assignment]


def _run_child(kill_at: int | None, fn: Callable[[], None], report: int) -> None:
    counter = [0]
    try:
        _instrument(kill_at, counter)
        fn()
        os.write(report, str(counter[0]).encode())
        os._exit(0)
    except BaseException:
        os._exit(3)


def kill_at_step(k: int | None, fn: Callable[[], None]) -> tuple[bool, int]:
    """(whether the child was killed, how many steps it took when it was not)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        _run_child(k, fn, write)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    steps = os.read(read, 64).decode()
    os.close(read)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True, -1
    assert os.WEXITSTATUS(status) == 0, "the save failed in the child"
    return False, int(steps)


def count_steps(fn: Callable[[], None]) -> int:
    killed, steps = kill_at_step(None, fn)
    assert not killed
    return steps
