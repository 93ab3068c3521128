"""The demo: the tiny model trained with replay and on-policy on the same compute budget.

Both runs start from the shipped model, get the same measured compute budget (generation +
scoring + training seconds; evaluation excluded) and are evaluated on the same held-out split.
Prints a table — accuracy, compute, μ, compute to reach the on-policy run's final accuracy and
the share of it replay saves — and writes `accuracy_vs_compute.png` and `demo.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from llm_replay.config import ConfigError, load_config
from llm_replay.report import compute_to_reach, plot_accuracy_vs_compute

CONFIGS = {"replay": "configs/replay_uniform.yaml", "on-policy": "configs/on_policy.yaml"}
BUDGET_SECONDS = 120.0
console = Console()


def _overrides(out: Path, name: str, quick: bool) -> list[str]:
    sets = [f"log.run_dir={out / name}", "log.tensorboard=true"]
    if quick:
        sets += ["train.iterations=2", "eval.every=1", "eval.size=32", "eval.pass_size=8"]
    else:
        sets += [f"train.compute_seconds={BUDGET_SECONDS}", "train.iterations=1000"]
    return sets


def run_demo(
    out: Path, *, quick: bool = False, configs: dict[str, str] | None = None
) -> dict[str, Any]:
    from llm_replay.training import print_summary, run_training

    configs = configs or CONFIGS
    summaries: dict[str, dict[str, Any]] = {}
    for label, path in configs.items():
        if not Path(path).is_file():
            raise ConfigError(f"{path}: demo config not found (run from the repository root)")
        config = load_config(path, _overrides(out, label, quick))
        console.rule(f"[bold]{label}[/]: {path}")
        summaries[label] = run_training(config)
    print_summary(list(summaries.values()))

    baseline = summaries["on-policy"]
    target = baseline["final_accuracy"]
    table = Table(title=f"compute to reach the on-policy final accuracy ({100 * target:.1f}%)")
    for column in ("run", "accuracy gain", "compute s to target", "compute saved vs on-policy"):
        table.add_column(column, justify="left" if column == "run" else "right")
    base_cost = compute_to_reach(out / "on-policy", target)
    result: dict[str, Any] = {"budget_seconds": None if quick else BUDGET_SECONDS, "runs": {}}
    for label, summary in summaries.items():
        cost = compute_to_reach(out / label, target)
        saved = None if cost is None or not base_cost else 1.0 - cost / base_cost
        gain = summary["final_accuracy"] - summary["base_accuracy"]
        table.add_row(
            label,
            f"{100 * gain:+.1f} pts",
            "not reached" if cost is None else f"{cost:.1f}",
            "—" if saved is None else f"{100 * saved:+.0f}%",
        )
        result["runs"][label] = {
            "base_accuracy": summary["base_accuracy"],
            "final_accuracy": summary["final_accuracy"],
            "best_accuracy": summary["best_accuracy"],
            "gain_points": 100 * gain,
            "compute_seconds": summary["compute_seconds"],
            "mu": summary["mu"],
            "steps": summary["steps"],
            "compute_to_on_policy_final": cost,
            "compute_saved": saved,
        }
    console.print(table)
    png = plot_accuracy_vs_compute(
        [(label, out / label) for label in summaries],
        out / "accuracy_vs_compute.png",
        title="Tiny Qwen2 on chain_sum: replay vs on-policy",
    )
    (out / "demo.json").write_text(json.dumps(result, indent=1) + "\n")
    console.print(f"plot: {png}\nfigures: {out / 'demo.json'}")
    return result
