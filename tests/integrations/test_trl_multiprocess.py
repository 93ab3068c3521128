"""Two CPU processes (torchrun, gloo) run uniform replay through ReplayGRPOTrainer: both tables hold
the same groups, every drawn batch is the same on both before each takes its slice, and a run
resumed from its checkpoint continues exactly as an uninterrupted one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("trl_worker.py")


def launch(out: Path, steps: int, *, resume: bool = False) -> list[dict[str, object]]:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun is not None, "torchrun ships with torch"
    command = [torchrun, "--nproc_per_node", "2", "--master_port", str(29500 + os.getpid() % 400)]
    command += [str(WORKER), "--out", str(out), "--steps", str(steps)]
    done = subprocess.run(
        [*command, *(["--resume"] if resume else [])],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tag = "resumed" if resume else "first"
    return [json.loads((out / f"report-{tag}-{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.timeout(600)
def test_two_processes_share_one_table_and_resume(tmp_path: Path) -> None:
    first = launch(tmp_path / "run", 4)
    assert [r["processes"] for r in first] == [2, 2]
    assert first[0]["draws"] == first[1]["draws"] and len(first[0]["draws"]) == 4
    assert first[0]["table"] == first[1]["table"]
    assert first[0]["table_size"] == 16  # 2 rounds of 2 prompts × 4 completions, gathered

    resumed = launch(tmp_path / "run", 6, resume=True)
    assert [r["global_step"] for r in resumed] == [6, 6]
    assert resumed[0]["table"] == resumed[1]["table"]

    whole = launch(tmp_path / "whole", 6)
    assert whole[0]["draws"][:4] == first[0]["draws"]
    assert whole[0]["draws"][4:] == resumed[0]["draws"]
    assert whole[0]["table"] == resumed[0]["table"]
