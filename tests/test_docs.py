"""The documentation site's pages stay true: their code runs, the summary matches the archive.

`make docs` (run by `make test`) builds the site in strict mode, so a broken link, a page missing
from the nav or a reference that no longer resolves fails the build; these tests cover what a
build cannot see.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
BLOCKS = [
    (page.name, index, block)
    for page in PAGES
    for index, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))
]


@pytest.mark.parametrize(
    ("page", "index", "block"), BLOCKS, ids=[f"{p}[{i}]" for p, i, _ in BLOCKS]
)
def test_a_pages_python_runs_in_a_fresh_interpreter(page: str, index: int, block: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, f"docs/{page} block {index}:\n{done.stderr[-3000:]}"


def test_the_how_to_method_trains() -> None:
    """docs/add-a-method.md's module registers a method that the pipeline builds and draws from."""
    (block,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs/add-a-method.md").read_text(), re.S)
    check = """
import numpy as np
from llm_replay.methods import METHODS, MethodContext, ReplayPipeline
from tests.conftest import make_batch
context = MethodContext(batch_size=8, rollouts_per_step=16, group_size=4)
pipeline = ReplayPipeline.build("recency", METHODS["recency"].Config(), context)
samples = list(pipeline.batches(make_batch(np.random.default_rng(0), 16)))
y = METHODS["recency"].Config().replay_ratio
assert len(samples) == round(y * 16 / 8) and all(len(s) == 8 for s in samples), len(samples)
"""
    done = subprocess.run(
        [sys.executable, "-c", block + check], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_how_to_loss_is_what_it_says() -> None:
    (block,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs/add-a-loss.md").read_text(), re.S)
    check = """
import torch
from llm_replay.algorithms.losses import policy_loss
logprobs = torch.log(torch.tensor([[0.5, 0.25]]))
behaviour = torch.log(torch.tensor([[0.1, 0.25]]))  # ratios 5 (clipped at 2) and 1
value, _ = policy_loss("clipped_is", logprobs, behaviour, torch.tensor([1.0]), torch.ones(1, 2))
expected = -(2 * logprobs[0, 0] + 1 * logprobs[0, 1]) / 2
assert torch.isclose(value, expected), (value, expected)
"""
    done = subprocess.run(
        [sys.executable, "-c", block + check], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_results_summary_matches_the_archived_runs() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/results_summary.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readme_stays_short_and_points_into_the_site() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).is_file(), target


def test_the_layout_page_names_every_module_and_only_files_that_exist() -> None:
    """docs/layout.md is the map of the tree: every module under src/llm_replay is named on it
    (by its name, as a word), and every `NAME.py` it names exists in the repository."""
    text = (ROOT / "docs" / "layout.md").read_text()
    package = ROOT / "src" / "llm_replay"
    modules = [
        p.relative_to(package)
        for p in package.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    ]
    unnamed = [str(p) for p in modules if not re.search(rf"\b{re.escape(p.stem)}\b", text)]
    assert not unnamed, f"docs/layout.md does not name {unnamed}"
    present = {
        p.name
        for folder in ("src", "benchmarks", "examples", "scripts", "tests")
        for p in (ROOT / folder).rglob("*.py")
    }
    named = {f"{stem}.py" for stem in re.findall(r"([A-Za-z_]\w*)\.py\b", text)}
    assert not named - present, f"docs/layout.md names files that do not exist: {named - present}"
