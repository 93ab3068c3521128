"""The demo: the recommended default, `auto`, against on-policy GRPO, on the same compute budget,
from the shipped tiny model.

`auto` is positive-biased replay with AsymRE annealed to on-policy between 10% and 60% of the
budget, with KL-Cov on the reused tokens, AR3PO's adaptive rollouts and two gradient steps a
round (docs/methods.md). The demo's budget (6·10⁵ on μ = 5, ~3 minutes) is a short run far below
on-policy's plateau; there `auto` needed 0.37× of on-policy's compute at three seeds (0.50× at one
step a round, `--replay auto_steps1`, the demo's replay from issue #38 to #53), where plain
positive-biased replay (`--replay positive`, the demo until issue #38) needed 0.51× and the
schedule alone (`--replay positive_schedule`) 0.70× (docs/RESULTS.md, "`auto` takes two gradient
steps a round" and "`auto` becomes the schedule with KL-Cov and adaptive rollouts").

The budget is on the μ = 5 cost basis (completion tokens generated × 5 + completion tokens
trained on), a count, so a busy laptop and an idle server run the same steps and draw the same
curves; measured seconds are reported beside it, and flagged as not comparable where a fixed
piece of work timed beside each run (`metrics.speed_probe`) says the machine's load changed
between the two runs by more than a quarter. "Compute to reach the target" is compare's
definition (`analysis.compare_methods`): the first evaluation whose trailing mean of three reaches
the on-policy run's final trailing mean. Writes `accuracy_vs_compute.png` and `demo.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from llm_replay.config import load_config
from llm_replay.experiments.analysis import RunCurves, compare_methods
from llm_replay.experiments.report import plot_accuracy_vs_compute
from llm_replay.metrics.speed_probe import SpeedProbe, seconds_verdict
from llm_replay.terminal import console, print_summary, run_training

CONFIGS = {"replay": "auto", "on-policy": "on_policy"}
BASIS = "mu_5"
BUDGET = 600_000  # on the μ = 5 basis: ≈ 117 on-policy iterations of 256 rollouts
EVAL_EVERY = 60_000
BASES = (BASIS, "measured")
MU_SENTENCE = (
    "μ is what generating a rollout costs over what training on it costs; μ = 5 is typical of "
    "large models served for RL, where generation dominates, while this machine's measured μ "
    "is lower (it trains a tiny model on a CPU), so replay saves less there."
)


NEXT_STEPS = """what to read next:
  llm-replay presets              the shipped presets, one line each; train any by name
  llm-replay train auto           the recommended default (the demo's replay run)
  llm-replay presets --show auto  a preset written out whole, to copy and edit
  llm-replay methods              every replay method and option, with its paper and knobs
  the documentation site (`make docs` in a clone): reading-results, methods, RESULTS"""


def _overrides(out: Path, name: str, quick: bool) -> list[str]:
    sets = [f"log.run_dir={out / name}", "log.tensorboard=true"]
    if quick:
        sets += ["train.iterations=2", "eval.every=1", "eval.size=32", "eval.pass_size=8"]
    else:
        sets += [
            f"train.budget_basis={BASIS}",
            f"train.compute_budget={BUDGET}",
            f"eval.every_compute={EVAL_EVERY}",
            "eval.every=1000",
            "train.iterations=100000",
        ]
    return sets


def run_demo(
    out: Path, *, quick: bool = False, configs: dict[str, str] | None = None
) -> dict[str, Any]:
    configs = configs or CONFIGS
    summaries: dict[str, dict[str, Any]] = {}
    loaded = {
        label: load_config(path, _overrides(out, label, quick)) for label, path in configs.items()
    }
    probes: dict[str, list[float]] = {}
    for label, config in loaded.items():
        path = configs[label]
        console.rule(f"[bold]{label}[/]: {path}")
        with SpeedProbe() as probe:
            summaries[label] = run_training(config)
        probes[label] = probe.samples
    print_summary(list(summaries.values()))
    verdict = seconds_verdict(probes)

    runs = {label: [RunCurves.load(out / label)] for label in summaries}
    compared = compare_methods(runs, baseline="on-policy", bases=BASES)
    target = compared["target_accuracy"]
    table = Table(title=f"compute to reach the on-policy final accuracy ({100 * target:.1f}%)")
    for column in (
        "run",
        "accuracy gain",
        "to target, μ=5 basis",
        "÷ on-policy (μ=5)",
        "to target, measured s",
        "÷ on-policy (measured)",
    ):
        table.add_column(column, justify="left" if column == "run" else "right")
    result: dict[str, Any] = {
        "budget": None if quick else {"basis": BASIS, "amount": BUDGET},
        "target_accuracy": target,
        "measured_seconds": verdict,
        "runs": {},
    }
    for label, summary in summaries.items():
        method = compared["methods"][label]
        cost, ratio = method["compute_to_target"], method["compute_to_target_ratio"]
        gain = summary["final_accuracy"] - summary["base_accuracy"]
        table.add_row(
            label,
            f"{100 * gain:+.1f} pts",
            _amount(cost[BASIS], "{:.3g}"),
            _amount(ratio[BASIS], "{:.2f}×"),
            _amount(cost["measured"], "{:.1f}"),
            _amount(ratio["measured"], "{:.2f}×"),
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
            "ratio_to_on_policy": ratio,
        }
    console.print(table)
    if verdict["comparable"] is False:
        others = [label for label in verdict["medians"] if label != verdict["slowest"]]
        console.print(
            f"[bold yellow]measured seconds not comparable:[/] this machine ran "
            f"{verdict['slowdown']:.1f}× slower during the {verdict['slowest']} run than during "
            f"the {', '.join(others)} run (a fixed piece of work timed every 2 s beside each run; "
            "other work shares the machine); read the μ = 5 columns, which count work"
        )
    console.print(MU_SENTENCE)
    png = plot_accuracy_vs_compute(
        [(label, out / label) for label in summaries],
        out / "accuracy_vs_compute.png",
        title=f"Tiny Qwen2 on chain_sum: replay ({configs['replay']}) vs on-policy",
    )
    (out / "demo.json").write_text(json.dumps(result, indent=1) + "\n")
    console.print(f"plot: {png.resolve()}\nfigures: {(out / 'demo.json').resolve()}")
    console.print(NEXT_STEPS, highlight=False, soft_wrap=True)
    return result


def _amount(value: float | None, form: str) -> str:
    return "not reached" if value is None else form.format(value)
