"""Async-runtime benchmark: the threaded runtime against the sync loop, same config, same machine.

Two workloads bracket the two regimes an asynchronous replay run can be in:

- `generation-bound`: long completions (a randomly initialised tiny Qwen2 built here, which rarely
  samples EOS, so every rollout runs to `max_new_tokens=64`), two prompts × 8 per work item, one
  generation worker. Generation costs more per rollout than y × training, as with large models
  served for RL (the replay paper measured μ ≈ 5.3), so the learner waits for data.
- `learner-bound`: the shipped tiny model on its chain-sum task (answers of a few tokens), the
  `uniform` preset's 32 × 8 rollouts per item, two workers. Here y × training costs more
  than generation, so the rate limiter holds the generators back by design.

Both use uniform replay with y = 2 (`uniform`). For each workload the threaded
runtime and the sync loop run the same number of gradient steps; reported per run: μ, generator
and learner idle shares, the table's share of learner busy time, rollouts in and samples out per
second, and wall seconds per gradient step over the timed span (first iteration's end to last's,
so loading and evaluation are excluded), with the sync/threaded ratio. Figures are printed;
`--json PATH` writes them.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from llm_replay.config import load_config
from llm_replay.config.files import PRESETS_DIR
from llm_replay.runtime import build_trainer

ROOT = Path(__file__).resolve().parents[1]
PRESET = PRESETS_DIR / "uniform.yaml"
QUIET = [
    "eval.size=8",
    "eval.pass_size=0",
    "eval.every=1000000",
    "log.tensorboard=false",
    "log.checkpoint_every=0",
]


def build_random_model(directory: Path) -> Path:
    """A randomly initialised tiny Qwen2 with the shipped character tokenizer (rarely stops)."""
    from transformers import AutoModelForCausalLM

    from llm_replay.models.tiny import build_char_tokenizer, tiny_qwen2_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_qwen2_config())
    model.save_pretrained(directory)
    build_char_tokenizer().save_pretrained(directory)
    return directory


def workloads(model_dir: Path) -> dict[str, list[str]]:
    return {
        "generation-bound": [
            f"model.path={model_dir}",
            "generation.max_new_tokens=64",
            "generation.prompts_per_step=2",
            "workers.count=1",
        ],
        "learner-bound": ["workers.count=2"],
    }


def timed_run(overrides: list[str], runtime: str, steps: int, run_dir: Path) -> dict[str, Any]:
    probe = load_config(PRESET, [*QUIET, *overrides])
    per_iteration = probe.replay.samples_per_insert * probe.generation.rollouts_per_step
    if runtime == "sync":  # the sync loop owes y·R/B steps per iteration, carried as credit
        iterations = max(1, round(steps * probe.train.batch_size / per_iteration))
    else:
        iterations = steps // max(1, round(per_iteration / probe.train.batch_size))
    config = load_config(
        PRESET,
        [
            *QUIET,
            *overrides,
            f"runtime={runtime}",
            f"train.iterations={iterations}",
            f"log.run_dir={run_dir}",
        ],
    )
    marks: list[tuple[float, int]] = []
    last: dict[str, Any] = {}

    def mark(trainer: Any, record: dict[str, Any]) -> None:
        marks.append((time.perf_counter(), int(record["steps"])))
        last.clear()
        last.update(record)

    summary = build_trainer(config).run(on_iteration=mark)
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    out = {
        "runtime": runtime,
        "iterations": summary["iterations"],
        "steps": summary["steps"],
        "mu": summary["mu"],
        "seconds_per_step": (t1 - t0) / max(1, s1 - s0),
        "rollouts_generated": summary["counts"]["rollouts_generated"],
    }
    for key in (
        "async/generator_idle_fraction",
        "async/learner_idle_fraction",
        "async/table_share_of_learner",
        "async/rollouts_in_per_s",
        "async/samples_out_per_s",
        "async/samples_per_insert",
        "train/age_mean",
    ):
        if key in last:
            out[key.split("/", 1)[1]] = float(last[key])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=16, help="gradient steps per run")
    parser.add_argument("--quick", action="store_true", help="4 steps per run (smoke test)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    steps = 4 if args.quick else args.steps
    results: dict[str, Any] = {"steps": steps, "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_random_model(Path(tmp) / "random-tiny")
        for name, overrides in workloads(model_dir).items():
            runs = {
                runtime: timed_run(overrides, runtime, steps, Path(tmp) / f"{name}-{runtime}")
                for runtime in ("threaded", "sync")
            }
            runs["speedup"] = (
                runs["sync"]["seconds_per_step"] / runs["threaded"]["seconds_per_step"]
            )
            results["workloads"][name] = runs
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


def report(results: dict[str, Any]) -> None:
    table = Table(title=f"async runtime, uniform replay y=2, {results['steps']} steps per run")
    columns = (
        "workload",
        "μ",
        "gen idle",
        "learner idle",
        "table share",
        "in/s",
        "out/s",
        "s/step threaded",
        "s/step sync",
        "sync/threaded",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "workload" else "right")
    for name, runs in results["workloads"].items():
        t, s = runs["threaded"], runs["sync"]
        table.add_row(
            name,
            f"{t['mu']:.2f}",
            f"{100 * t['generator_idle_fraction']:.2f}%",
            f"{100 * t['learner_idle_fraction']:.1f}%",
            f"{100 * t['table_share_of_learner']:.3f}%",
            f"{t['rollouts_in_per_s']:.0f}",
            f"{t['samples_out_per_s']:.0f}",
            f"{t['seconds_per_step']:.2f}",
            f"{s['seconds_per_step']:.2f}",
            f"{runs['speedup']:.2f}×",
        )
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
