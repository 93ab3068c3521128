"""The training example runs as written (from the repository root, as the README says)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_train_tiny_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, "examples/train_tiny.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "accuracy 17.0% ->" in done.stdout and "mu = " in done.stdout


def test_train_async_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, "examples/train_async.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"accuracy \d+\.\d% -> \d+\.\d%", done.stdout)
    assert "40 gradient steps" in done.stdout and "generators idle" in done.stdout
