"""scripts/seed_traces.py on a small synthetic archive: the ratios, the pooled drift, a rule's
firing, and the table and plot the script writes."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 1000.0


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "seed_traces", ROOT / "scripts" / "seed_traces.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through the module
    spec.loader.exec_module(module)
    return module


def write_run(
    run_dir: Path, accuracy: list[float], m2: float, stale: float, correct: float = 0.3
) -> None:
    """Evaluations every 0.05 of the budget (compute on μ = 5: 5 × tokens generated) and four
    training records between each pair of them."""
    records = []
    step = BUDGET / (len(accuracy) - 1)
    for i, acc in enumerate(accuracy):
        records.append(
            {
                "kind": "eval",
                "iteration": 4 * i,
                "steps": 4 * i,
                "compute/tokens_generated": i * step / 5.0,
                "compute/completion_tokens_trained": 0.0,
                "eval/accuracy": acc,
                "eval/entropy": 0.5,
            }
        )
        if i < len(accuracy) - 1:
            for k in range(4):
                progress = (i + (k + 0.5) / 4) * step / BUDGET
                records.append(
                    {
                        "kind": "train",
                        "iteration": 4 * i + k + 1,
                        "signals/progress": progress,
                        "signals/log_ratio_m2": m2,
                        "signals/stale_fraction": stale,
                        "reward/correct_rate": correct + 0.1 * progress + 0.01 * (k % 2),
                        "train/replayed_fraction": stale,
                        "train/age_mean": 2.0 * stale,
                        "reward/zero_variance_groups": 0.4,
                        "generation/entropy": 1.0 - 0.3 * progress,
                    }
                )
    run_dir.mkdir(parents=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (run_dir / "metrics.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    protocol = {"train": {"compute_budget": BUDGET}}
    (run_dir / "protocol.json").write_text(json.dumps(protocol))


def linear(start: float, end: float, n: int = 21, until: float = 1.0) -> list[float]:
    """Accuracy rising linearly from `start` to `end` at `until` of the run, flat after."""
    return [start + (end - start) * min(1.0, i / (n - 1) / until) for i in range(n)]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for seed in range(3):
        write_run(
            root / "toy" / "on_policy" / f"seed-{seed}", linear(0.30, 0.40 + 0.01 * seed), 0, 0
        )
        # the method reaches 0.45 by half the run; seed 2 replays rows far off-policy and never
        # gets past 0.38
        end, until = (0.38, 1.0) if seed == 2 else (0.45, 0.5)
        m2 = 0.1 if seed == 2 else 0.01
        write_run(root / "toy" / "auto" / f"seed-{seed}", linear(0.30, end, until=until), m2, 0.5)
    return root


def test_ratios_and_drift(archive: Path) -> None:
    script = load_script()
    task = script.load_task(archive, "toy", "auto", "on_policy")
    assert task.budget == BUDGET
    ratios = script.paired(task)
    assert ratios[0] < 0.5  # reaches 0.40 by 0.45 of the run where on-policy needs all of it
    assert math.isinf(ratios[2])  # never reaches its on-policy seed's 0.42
    assert script.slow_seeds(ratios) == {2}
    # on-policy against itself: the better seeds' targets are never reached by the worse ones
    own = script.cross(task.base, task.base)
    assert len(own) == 6
    assert sum(math.isinf(r) for r in own) == 3
    target, reference, reads = script.common(task)
    assert target == pytest.approx(0.4045)  # seed 1's mean of its last three evaluations
    assert reference == pytest.approx(BUDGET)  # seed 0 never reaches it, seed 1 at its end
    assert reads["base"][1] == pytest.approx(1.0)
    assert reads["method"][0] < 0.5
    assert script.drift(task.method[2], 0.1) == pytest.approx(0.2)
    assert script.drift(task.base[0], 0.1) is None  # no stale rows on-policy


def test_rules_fire_where_they_should(archive: Path) -> None:
    script = load_script()
    task = script.load_task(archive, "toy", "auto", "on_policy")
    fired = {s: script.first_firing(script.rule_drift, task, s, r) for s, r in task.method.items()}
    assert fired == {0: None, 1: None, 2: 0.1}
    gaps = script.phase_gaps(task, "median")
    assert gaps[0][1] > 0 > gaps[2][2]  # ahead during the anneal; seed 2 behind after it


def test_main_prints_the_tables_and_draws(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_script()
    out = tmp_path / "plots"
    assert script.main(["--archive", str(archive), "--out", str(out), "--tasks", "toy",
                        "--method", "auto"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "### toy" in printed
    assert "| 2 **slow** | never |" in printed
    assert "### Stopping rules on the archive" in printed
    assert "toy 2@0.10 (never)" in printed
    assert (out / "seed_traces.png").stat().st_size > 10_000
