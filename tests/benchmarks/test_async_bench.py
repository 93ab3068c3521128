"""The async-runtime benchmark runs end to end and writes the figures it promises (shape only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_async_benchmark_writes_both_workloads(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "async_runtime.py"),
            "--quick",
            "--json",
            str(out),
        ],
        check=True,
        timeout=600,
    )
    results = json.loads(out.read_text())
    for name in ("generation-bound", "learner-bound"):
        runs = results["workloads"][name]
        assert runs["speedup"] == pytest.approx(
            runs["sync"]["seconds_per_step"] / runs["threaded"]["seconds_per_step"]
        )
        for key in ("generator_idle_fraction", "learner_idle_fraction", "table_share_of_learner"):
            assert 0 <= runs["threaded"][key] <= 1
        assert runs["threaded"]["steps"] == runs["sync"]["steps"] == 4
