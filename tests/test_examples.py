"""The training example runs as written (from the repository root, as the README says)."""

from __future__ import annotations

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
