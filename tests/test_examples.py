"""The examples run as written (from the repository root, as the README says), on short budgets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _run_example(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, f"examples/{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_train_tiny_example_runs() -> None:
    stdout = _run_example("train_tiny.py", "--iterations", "6")
    build = json.loads((ROOT / "src/llm_replay/assets/tiny-chain-sum/build.json").read_text())
    base = build["greedy_accuracy_eval500"]  # what the shipped model scored when it was built
    assert f"accuracy {base:.1%} ->" in stdout and "mu = " in stdout
    assert re.findall(r"iteration +(\d+): ", stdout) == ["0", "3", "6"]


def test_train_async_example_runs() -> None:
    stdout = _run_example("train_async.py", "--iterations", "4")
    assert re.search(r"accuracy \d+\.\d% -> \d+\.\d%", stdout)
    assert "8 gradient steps" in stdout and "generators idle" in stdout


def test_trl_replay_example_runs_the_schedule() -> None:
    stdout = _run_example("trl_replay.py", "--steps", "4", "--method", "positive_schedule")
    assert re.search(r"reward \d\.\d+ -> \d\.\d+ over 4 steps", stdout)
    # 4 steps of 256: y = 2 at step 0 (two steps from the first round), the schedule's
    # scale 1 - (2/4 - 0.1)/0.5 = 0.2 at step 2 (y = 1.2: one step) and 0 at step 3 (on-policy)
    assert "3 generation rounds, 768 rollouts generated, 1024 trained, buffer 768" in stdout


def test_trl_replay_example_runs_auto() -> None:
    """`auto` inside TRL: the schedule with adaptive rollouts and KL-Cov, from the recipe alone."""
    stdout = _run_example("trl_replay.py", "--steps", "3")
    found = re.search(r"(\d\.\d) completions generated per prompt of 8", stdout)
    assert found and 2.0 <= float(found.group(1)) < 8.0  # at ~20% accuracy some prompts stop early
    held = re.search(r"KL-Cov held (\d+\.\d)% of a step's trained tokens", stdout)
    assert held and 0.0 < float(held.group(1)) <= 5.0  # 5% of the reused rows' tokens at most


def test_trl_online_dpo_example_replays_the_pairs_trl_judged() -> None:
    stdout = _run_example("trl_online_dpo_replay.py", "--steps", "4")
    assert re.search(r"score \d\.\d+ -> \d\.\d+ over 4 steps", stdout)
    generated, trained, stored = map(
        int, re.search(r"(\d+) pairs generated, (\d+) trained, (\d+) stored", stdout).groups()
    )
    assert generated == 4 * 32 and 0 < stored <= generated
    assert generated < trained <= generated + 3 * 16  # stored pairs from the second step on


def test_verl_example_data_is_verls_schema_and_the_model_reads_raw_text(tmp_path: Path) -> None:
    """examples/verl/prepare.py: parquet as verl's RLHFDataset reads it, and the model copy's chat
    template gives back the prompt as the model was trained on it."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    _run_example("verl/prepare.py", "--out", str(tmp_path))
    table = pq.read_table(tmp_path / "val.parquet").to_pylist()
    first = table[0]
    assert set(first) >= {"data_source", "prompt", "reward_model"}
    assert first["prompt"][0]["role"] == "user" and first["reward_model"]["ground_truth"]
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model", local_files_only=True)
    text = tokenizer.apply_chat_template(first["prompt"], tokenize=False)
    assert text == first["prompt"][0]["content"]


def test_the_loop_written_out_is_the_library_loop(tmp_path: Path) -> None:
    """examples/grpo_loop.py builds the parts and runs the loop by hand; SyncTrainer on the same
    config evaluates to the same held-out accuracies (same parts, same order, same seeds)."""
    from llm_replay.config import load_config
    from llm_replay.runtime import SyncTrainer

    stdout = _run_example("grpo_loop.py", "--iterations", "4", "--eval-every", "2")
    by_hand = [float(v) for v in re.findall(r"held-out accuracy ([0-9.]+)%", stdout)]
    config = load_config(
        "positive",
        [
            "train.iterations=4",
            "eval.every=2",
            "log.tensorboard=false",
            f"log.run_dir={tmp_path}",
        ],
    )
    summary = SyncTrainer(config).run()
    library = [100 * summary["base_accuracy"]]
    from llm_replay.metrics import read_log

    library += [100 * r["eval/accuracy"] for r in read_log(tmp_path) if r["kind"] == "eval"]
    assert len(by_hand) == 3
    np.testing.assert_allclose(by_hand, library[-3:], atol=0.05)
