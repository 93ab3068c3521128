"""A real verl run with an llm-replay method: vLLM rollout, FSDP actor, one GPU (marked `gpu`).

Not run by `make test` (no GPU there). On a machine with CUDA, vLLM and verl's GPU extras:
    .venv/bin/python examples/verl/prepare.py --out runs/verl_tiny
    LLM_REPLAY_VERL_DATA=runs/verl_tiny .venv-verl/bin/python -m pytest -m gpu \\
        tests/integrations/verl_v1/test_verl_gpu.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.gpu


def test_verl_trains_with_replay_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    data = os.environ.get("LLM_REPLAY_VERL_DATA")
    if not data:
        pytest.skip("set LLM_REPLAY_VERL_DATA to the folder examples/verl/prepare.py wrote")
    out = tmp_path / "run"
    out.mkdir()
    for name in ("train.parquet", "val.parquet", "model"):
        (out / name).symlink_to(Path(data).resolve() / name)
    script = ROOT / "examples" / "verl" / "run_replay.sh"
    env = {**os.environ, "OUT": str(out), "STEPS": "4", "PYTHON": sys.executable}
    first = subprocess.run(
        [str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert first.returncode == 0, first.stderr[-4000:]
    replayed = [float(v) for v in re.findall(r"llm_replay/replayed_rows:([0-9.]+)", first.stdout)]
    assert replayed and max(replayed) > 0
    assert (out / "checkpoints" / "global_step_4" / "llm_replay" / "sampler.json").is_file()
    env["STEPS"] = "6"
    resumed = subprocess.run(
        [str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert (out / "checkpoints" / "global_step_6" / "llm_replay" / "sampler.json").is_file()
