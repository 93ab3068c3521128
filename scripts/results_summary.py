"""The one-screen results summary, generated from the archived experiment summaries.

README.md, docs/index.md and docs/RESULTS.md carry the same table between the markers
`<!-- results-summary:start -->` and `<!-- results-summary:end -->`; `--write` regenerates it from
the `summary.json` files `llm-replay report` wrote, `--check` (run by the tests) fails when a copy
differs, so the figures a reader sees first cannot drift from the archived runs.

    python scripts/results_summary.py --write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- results-summary:start -->", "<!-- results-summary:end -->"
FILES = ("README.md", "docs/index.md", "docs/RESULTS.md")

# (setting, summary.json under docs/, method row, what the row is)
ROWS = (
    (
        "chain_sum, to on-policy's plateau",
        "experiment_plateau/against_on_policy_2x",
        "positive",
        "positive-biased replay + AsymRE (run to half the budget)",
    ),
    (
        "chain_sum, to on-policy's plateau",
        "experiment_plateau/against_on_policy_2x",
        "positive_schedule",
        "`positive_schedule` (`auto` until #38): the same, annealed to on-policy by 60% of the run",
    ),
    (
        "chain_sum, to on-policy's plateau",
        "experiment_plateau/against_on_policy_2x",
        "auto_kl_cov_ar3po",
        "**`auto`**: the schedule + KL-Cov on reused tokens + adaptive rollouts (issue #38)",
    ),
    (
        "spell_backward, 3.6·10⁷ on μ = 5",
        "experiment_spell_guard/against_on_policy_4x",
        "positive_guard_4x",
        "positive-biased replay + AsymRE, run to the whole budget (issue #53: the guard never acted)",
    ),
    (
        "spell_backward, 3.6·10⁷ on μ = 5",
        "experiment_spell/against_on_policy_4x",
        "positive_schedule",
        "`positive_schedule` (`auto` until #38): the same, annealed to on-policy by 60% of the run",
    ),
    (
        "spell_backward, 3.6·10⁷ on μ = 5",
        "experiment_spell/against_on_policy_4x",
        "auto_kl_cov_ar3po",
        "**`auto`**: the schedule + KL-Cov on reused tokens + adaptive rollouts (issue #38)",
    ),
    (
        "held-out task simple_equations, 10⁶ on μ = 5",
        "experiment_heldout/simple_equations",
        "auto",
        "**`auto`** on a task added after it was chosen (issue #38)",
    ),
    (
        "held-out task count_primes, 10⁶ on μ = 5",
        "experiment_heldout/count_primes",
        "auto",
        "**`auto`** on a task added after it was chosen (issue #38)",
    ),
    (
        "a new kind, palindrome_generation (several right answers), 10⁶ on μ = 5",
        "experiment_palindrome/palindrome_generation",
        "auto",
        "**`auto`** on a task of a kind the suite lacks, added after #53's sweep (issue #53)",
    ),
    (
        "a search task, countdown (many right answers), 2·10⁶ on μ = 5",
        "experiment_countdown_10seeds/countdown/against_on_policy_2x",
        "auto_2x",
        "**`auto`** on a task of a kind the suite lacks, added after the guard (issue #53)",
    ),
    (
        "threaded runtime, chain_sum, 9·10⁵ on μ = 5",
        "experiment_runtimes/against_on_policy_threaded",
        "auto_threaded",
        "**`auto`**, generation workers and the learner at once (issue #38)",
    ),
    (
        "inside TRL's GRPOTrainer, chain_sum",
        "experiment_trl/current",
        "trl_positive",
        "positive-biased replay + AsymRE",
    ),
    (
        "inside TRL's GRPOTrainer, chain_sum",
        "experiment_trl/auto_kl_cov_ar3po",
        "trl_auto_kl_cov_ar3po",
        "**`auto`**: the schedule + KL-Cov on reused tokens + adaptive rollouts (issue #38)",
    ),
    (
        "a mixture: gcd, products, binary_alternation, lcm in one run, 2·10⁶ on μ = 5",
        "experiment_mixture",
        "auto",
        "**`auto`**, one policy on four suite tasks at once (issue #56)",
    ),
)


def _ratio(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.2f}×"


def table() -> str:
    lines = [
        "| setting | method | seeds | final accuracy | on-policy's | compute to on-policy's "
        "final accuracy (μ = 5) |",
        "|---|---|---|---|---|---|",
    ]
    for setting, folder, method, label in ROWS:
        summary = json.loads((ROOT / "docs" / folder / "summary.json").read_text())
        row = summary["methods"][method]
        baseline = summary["methods"][summary["baseline"]]
        ratio = row["compute_to_target_ratio"].get("mu_5")
        lines.append(
            f"| {setting} | {label} (`{method}`) | {row['seeds']} | "
            f"{row['final_accuracy']['median']:.1%} | "
            f"{baseline['final_accuracy']['median']:.1%} | {_ratio(ratio)} |"
        )
    return "\n".join(lines)


def block() -> str:
    return f"{START}\n{table()}\n{END}"


def replaced(text: str, path: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"{path}: no {START} … {END} block")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + block() + tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate every copy")
    action.add_argument("--check", action="store_true", help="fail if a copy differs")
    args = parser.parse_args()
    stale = []
    for name in FILES:
        path = ROOT / name
        text = path.read_text()
        new = replaced(text, name)
        if new != text:
            if args.write:
                path.write_text(new)
            stale.append(name)
    if args.check and stale:
        print(f"stale results summary in {stale}: run python scripts/results_summary.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
