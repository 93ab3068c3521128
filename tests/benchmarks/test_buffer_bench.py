"""The buffer benchmark runs end to end (tiny scale) and writes the figures it promises.

Only the shape of the report is checked; figures are never asserted in tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_writes_ratios(tmp_path: Path) -> None:
    pytest.importorskip("torchrl")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "buffer.py"),
            "--scale",
            "0.001",
            "--scenario",
            "short",
            "--impl",
            "llm-replay",
            "--impl",
            "torchrl-lazy",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    ours = next(r for r in report if r["implementation"] == "llm-replay")
    assert set(ours["ratio_vs_peer"]) >= {"insert", "sample"}
    for key in (
        "insert_rollouts_per_s",
        "sample_batches_per_s",
        "sample_p50_us",
        "sample_p99_us",
        "resident_bytes_per_token",
    ):
        assert ours[key] > 0
    assert "ratio vs best peer" in proc.stdout
