"""The README's install block, run as written: build the wheel and the sdist, install the wheel
(not editable) into a clean virtual environment, and train from a directory that is not the
repository. Slow (a minute of pip), so `make test` runs it on its own (`make install-test`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from llm_replay import __version__

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
HEADING = "## Install, then train from any directory"
ENV = "/tmp/llm-replay-env"
INSTALL_SECONDS = 1200  # the subprocess's limit and the test's (pytest-timeout's default is 300)


def install_block() -> str:
    text = README.read_text()
    section = text[text.index(HEADING) :]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match is not None, "the install section has no bash block"
    return match.group(1)


def test_the_install_block_names_the_commands_the_acceptance_asks_for() -> None:
    block = install_block()
    for command in (
        "python3 -m build --outdir dist",
        'pip install torch==2.13.0 "$(ls dist/llm_replay-*.whl)[train]"',
        'cd "$(mktemp -d)"',
        "llm-replay train auto --set train.iterations=2",
        "llm-replay methods",
        "llm-replay demo",
    ):
        assert command in block
    assert " -e " not in block and "--editable" not in block


@pytest.mark.slow
@pytest.mark.timeout(INSTALL_SECONDS)  # pip and torch: 150 s alone, over 300 s on a busy machine
def test_the_wheel_installs_into_a_clean_environment_and_trains_anywhere(tmp_path: Path) -> None:
    dist, env = tmp_path / "dist", tmp_path / "env"
    script = (
        install_block()
        .replace("--outdir dist", f"--outdir {dist}")
        .replace("ls dist/", f"ls {dist}/")
        .replace(ENV, str(env))
        .replace("python3 ", f"{sys.executable} ")
    )
    assert ENV not in script and " dist/" not in script
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))
    }
    environment["PATH"] = os.pathsep.join(
        p for p in environment.get("PATH", "").split(os.pathsep) if ".venv" not in p
    )
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]

    wheel = next(dist.glob("llm_replay-*.whl"))
    sdist = next(dist.glob("llm_replay-*.tar.gz"))
    assert wheel.name.startswith(f"llm_replay-{__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"llm_replay/presets/auto.yaml", "llm_replay/presets/base/chain_sum.yaml"} <= names
    assert "llm_replay/assets/tiny-chain-sum/model.safetensors" in names
    with tarfile.open(sdist) as archive:
        assert any(n.endswith("src/llm_replay/presets/auto.yaml") for n in archive.getnames())

    site = next(env.glob("lib/python*/site-packages"))
    assert (site / "llm_replay" / "presets" / "auto.yaml").is_file()  # a copy, not a link back
    assert not list(site.glob("__editable__*")) and not list(site.glob("*.egg-link"))
    assert f"llm-replay {__version__}" in result.stdout
    assert "auto ━" in result.stdout or "│ auto │" in result.stdout  # the run's summary row
    assert "replay methods" in result.stdout  # `llm-replay methods`' table
    assert "accuracy_vs_compute.png" in result.stdout  # the demo drew its plot
    assert not re.search(r"\w+Warning:", output), output[-4000:]  # none from our code, none at all
    assert "Traceback" not in output


def test_the_getting_started_page_shows_the_same_block() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert f"```bash\n{install_block()}```" in page
