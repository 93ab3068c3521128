"""The examples run as written (from the repository root, as the README says)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_example(name: str) -> str:
    done = subprocess.run(
        [sys.executable, f"examples/{name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_train_tiny_example_runs() -> None:
    stdout = _run_example("train_tiny.py")
    assert "accuracy 17.0% ->" in stdout and "mu = " in stdout


def test_train_async_example_runs() -> None:
    stdout = _run_example("train_async.py")
    assert re.search(r"accuracy \d+\.\d% -> \d+\.\d%", stdout)
    assert "40 gradient steps" in stdout and "generators idle" in stdout
