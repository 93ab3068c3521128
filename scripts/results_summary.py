"""The one-screen results summaries, generated from the archived experiment summaries.

Four tables, each carried between its markers by the pages that show it:

- `results-summary` (README.md, docs/index.md, docs/RESULTS.md): each setting's headline method
  against on-policy GRPO at the method's own settings;
- `tuned-summary` (docs/methods.md, docs/RESULTS.md; issue #53): `auto_steps1` (one gradient step
  a round, `auto` until #53) and `auto_steps2` (two, `auto` since) on every
  task read against on-policy tuned one knob at a time, the one member a user would pick (the
  tuned member) and the best member on each seed (the envelope), with the median over tasks;
- `acceptance-53` (docs/RESULTS.md): issue #53's acceptance read line by line from the same
  summaries for `auto_steps1`, `auto_steps2` and `auto_steps2_kl10`, each line met or not, so the
  verdicts are counted by code rather than by hand (`scripts/acceptance_53.py`);
- `candidates-53` (docs/RESULTS.md): every candidate #53 read at five seeds on its median tasks,
  side by side, each against the envelope of the experiment that ran it.

`--write` regenerates every copy from the `summary.json` files `llm-replay report` wrote, `--check`
(run by the tests) fails when a copy differs, so the figures a reader sees cannot drift from the
archived runs. `--plot` draws the tuned table's tasks' final gaps (`experiments/final_gap.py`) into
`docs/final_gap_by_task.png`.

    python scripts/results_summary.py --write
    python scripts/results_summary.py --plot
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llm_replay.experiments.analysis import median_or_none
from llm_replay.experiments.final_gap import VERDICTS as GAP_CALLS
from llm_replay.experiments.final_gap import plot_gaps
from llm_replay.experiments.sweep_knobs import PLAYBOOK

sys.path.insert(0, str(Path(__file__).resolve().parent))  # acceptance_53 sits beside it
import acceptance_53

ROOT = Path(__file__).resolve().parents[1]

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
        "`auto_steps1` (one step a round, the default #38–#53): the schedule + KL-Cov on reused "
        "tokens + adaptive rollouts",
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
        "`auto_steps1` (one step a round, the default #38–#53): the schedule + KL-Cov on reused "
        "tokens + adaptive rollouts",
    ),
    (
        "held-out task simple_equations, 10⁶ on μ = 5",
        "experiment_heldout/simple_equations",
        "auto_steps2",
        "**`auto`** (two steps a round since #53) on a task added after it was chosen (issue #38)",
    ),
    (
        "held-out task count_primes, 10⁶ on μ = 5",
        "experiment_heldout/count_primes",
        "auto_steps2",
        "**`auto`** (two steps a round since #53) on a task added after it was chosen (issue #38)",
    ),
    (
        "a new kind, palindrome_generation (several right answers), 10⁶ on μ = 5",
        "experiment_palindrome/palindrome_generation",
        "auto_steps2",
        "**`auto`** (two steps a round since #53) on a task of a kind the suite lacks, added after #53's sweep",
    ),
    (
        "a search task, countdown (many right answers), 2·10⁶ on μ = 5",
        "experiment_countdown_10seeds/countdown/against_on_policy_2x",
        "auto_steps2_2x",
        "**`auto`** (two steps a round since #53) on a task of a kind the suite lacks, added after the guard",
    ),
    (
        "a new kind, number_sequence (pattern induction), 10⁶ on μ = 5",
        "experiment_number_sequence/number_sequence",
        "auto",
        "**`auto`** as shipped, on a task of a kind the suite lacks, added after #53's work was done",
    ),
    (
        "threaded runtime, chain_sum, 9·10⁵ on μ = 5",
        "experiment_runtimes/against_on_policy_threaded",
        "auto_steps2_threaded",
        "**`auto`** (two steps a round since #53), generation workers and the learner at once",
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
        "**`auto`** in TRL: the schedule + KL-Cov on reused tokens + adaptive rollouts, at one "
        "step a generation (what TRL's adaptive rollouts need)",
    ),
    (
        "a mixture: gcd, products, binary_alternation, lcm in one run, 2·10⁶ on μ = 5",
        "experiment_mixture",
        "auto_steps2",
        "**`auto`** (two steps a round since #53), one policy on four suite tasks at once",
    ),
)


_ratio = acceptance_53.ratio_text


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


SUITE_SWEEP = "experiment_suite_group_sweep_5seeds/suite_summary.json"
KL10 = "auto_steps2_kl10"  # KL-Cov on 10% of the reused tokens: read where it ran
SUITE_METHODS = {"auto_steps1": "auto_carry", "auto_steps2": "auto_steps2", KL10: KL10}
BUILT_IN_METHODS = {"auto_steps1": "auto_kl_cov_ar3po", "auto_steps2": "auto_steps2", KL10: KL10}
LATER_METHODS = {"auto_steps1": "auto", "auto_steps2": "auto_steps2", KL10: KL10}
HELDOUT_SWEEP = "experiment_heldout_sweep_5seeds/suite_summary.json"

# (task, what it is, summary.json under docs/, its task in a suite summary or None, the rows of
# `auto` and `auto_steps2` in it, whether it reads a sweep; where not, the row is read against plain
# on-policy, the member a smaller sweep of the task picked, and has no envelope)
TUNED_ROWS = (
    ("gcd", "suite", SUITE_SWEEP, "gcd", SUITE_METHODS, True),
    ("products", "suite", SUITE_SWEEP, "products", SUITE_METHODS, True),
    ("binary_alternation", "suite", SUITE_SWEEP, "binary_alternation", SUITE_METHODS, True),
    ("lcm", "suite", SUITE_SWEEP, "lcm", SUITE_METHODS, True),
    (
        "chain_sum",
        "built-in",
        "experiment_chain_sum_group_sweep/summary.json",
        None,
        BUILT_IN_METHODS,
        True,
    ),
    (
        "spell_backward",
        "built-in",
        "experiment_spell_group_sweep_5seeds/summary.json",
        None,
        BUILT_IN_METHODS,
        True,
    ),
    (
        "palindrome_generation",
        "a new kind, added after the sweep",
        "experiment_palindrome_group_sweep/suite_summary.json",
        "palindrome_generation",
        LATER_METHODS,
        True,
    ),
    ("simple_equations", "held out", HELDOUT_SWEEP, "simple_equations", LATER_METHODS, True),
    ("count_primes", "held out", HELDOUT_SWEEP, "count_primes", LATER_METHODS, True),
    (
        "countdown (2·10⁶)",
        "a new kind, added after the guard",
        "experiment_countdown_10seeds/suite_summary.json",
        "countdown",
        {"auto_steps1": "auto_2x", "auto_steps2": "auto_steps2_2x"},
        False,
    ),
    (
        "number_sequence",
        "a new kind, added after #53's work",
        "experiment_number_sequence/suite_summary.json",
        "number_sequence",
        {"auto_steps1": "auto_steps1", "auto_steps2": "auto"},
        True,
    ),
)


def _reading(summary: dict, task: str | None, method: str) -> dict:
    """`acceptance_53.reading` of a method every tuned row has."""
    read = acceptance_53.reading(summary, task, method)
    assert read is not None, f"{task}: no {method} row"
    return read


def _gap_cell(reading: dict, totals: dict[str, int]) -> str:
    """ "+9.5 (3/2/0)": the median gap to the best member's final, in points, and its seeds
    above / level / below; added to `totals`. "—" where it was not read."""
    calls = reading["calls"]
    if reading["gap"] is None or not calls or None in calls:
        return "—"
    for call in GAP_CALLS:
        totals[call] += calls.count(call)
    return f"{reading['gap']:+.1f} ({'/'.join(str(calls.count(c)) for c in GAP_CALLS)})"


def _member_and_sweep(summary: dict, task: str | None) -> tuple[str, str]:
    """The tuned member's name, and the sweep's size with the playbook's knobs it leaves."""
    envelope = summary["tasks"][task]["envelope"] if task is not None else summary["envelope"]
    member = envelope["tuned_member"]
    if isinstance(member, dict):
        member = member["member"]["mu_5"]
    unswept = (
        envelope.get("unswept") if task is not None else envelope.get("sweep", {}).get("unswept")
    )
    left = f"; no {', '.join(PLAYBOOK[k] for k in unswept)}" if unswept else ""
    return member, f"{len(envelope['members'])}{left}"


def tuned_table() -> str:
    lines = [
        "| task | kind | seeds (`auto_steps1`, `auto_steps2`) | tuned member (settings swept) | "
        "`auto_steps1` vs tuned member | `auto_steps2` (`auto` since #53) vs tuned member | "
        "`auto_steps2` vs envelope | "
        "`auto_steps2`'s final − the best member's, points (seeds above/level/below) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    columns: dict[str, list[float | None]] = {"auto": [], "steps2": [], "envelope": []}
    totals = dict.fromkeys(GAP_CALLS, 0)
    for task, kind, path, key, methods, swept in TUNED_ROWS:
        summary = json.loads((ROOT / "docs" / path).read_text())
        auto = _reading(summary, key, methods["auto_steps1"])
        steps2 = _reading(summary, key, methods["auto_steps2"])
        member, members = _member_and_sweep(summary, key)
        tuned = f"`{member}` ({members})"
        envelope = _ratio(steps2["envelope"]) if swept else "—"
        gap = _gap_cell(steps2, totals) if swept else "—"
        if swept:
            columns["envelope"].append(steps2["envelope"])
        else:  # read against plain on-policy, the member a smaller sweep of the task picked
            tuned = f"`{member}` (plain, tuned at five seeds)"
        columns["auto"].append(auto["member"])
        columns["steps2"].append(steps2["member"])
        lines.append(
            f"| {task} | {kind} | {auto['seeds']}, {steps2['seeds']} | {tuned} | "
            f"{_ratio(auto['member'])} | {_ratio(steps2['member'])} | {envelope} | {gap} |"
        )
    lines.append(
        f"| **median over tasks** | | | | **{_ratio(median_or_none(columns['auto']))}** | "
        f"**{_ratio(median_or_none(columns['steps2']))}** | "
        f"**{_ratio(median_or_none(columns['envelope']))}** | "
        f"**seeds {'/'.join(str(totals[c]) for c in GAP_CALLS)}** |"
    )
    return "\n".join(lines)


def acceptance_table() -> str:
    """#53's acceptance for `auto_steps1`, `auto_steps2` and `auto_steps2_kl10` over the tuned table's
    tasks (`scripts/acceptance_53.py`)."""
    return acceptance_53.table(TUNED_ROWS, ROOT / "docs", ("auto_steps1", "auto_steps2", KL10))


SUITE_TASKS = ("gcd", "products", "binary_alternation", "lcm")


def _suite(folder: str, method: str) -> dict[str, tuple[str, str | None, str]]:
    return {task: (f"{folder}/suite_summary.json", task, method) for task in SUITE_TASKS}


def _single(task: str, folder: str, method: str) -> dict[str, tuple[str, str | None, str]]:
    return {task: (f"{folder}/summary.json", None, method)}


# Every candidate #53 read at five seeds on its median tasks, each against the envelope of the
# experiment that ran it: seven one-knob members on the suite and chain_sum (the playbook's six
# and four steps a round), the playbook's six on spell_backward and for `auto_steps2_kl10`
CANDIDATES = {
    "auto_steps2": _suite("experiment_suite_lr", "auto_steps2")
    | _single("chain_sum", "experiment_chain_sum_lr", "auto_steps2")
    | _single("spell_backward", "experiment_spell_lr", "auto_steps2"),
    "auto_steps4": _suite("experiment_suite_steps4", "auto_steps4")
    | _single("chain_sum", "experiment_chain_sum_steps4", "auto_steps4"),
    "auto_steps8to2": _suite("experiment_suite_step_anneal", "auto_steps8to2")
    | _single("chain_sum", "experiment_chain_sum_step_anneal", "auto_steps8to2"),
    "auto_steps4to1": _suite("experiment_suite_step_anneal", "auto_steps4to1")
    | _single("chain_sum", "experiment_chain_sum_step_anneal", "auto_steps4to1"),
    "auto_lr2x": _suite("experiment_suite_lr", "auto_lr2x")
    | _single("chain_sum", "experiment_chain_sum_lr", "auto_lr2x")
    | _single("spell_backward", "experiment_spell_lr", "auto_lr2x"),
    KL10: _suite("experiment_suite_group_sweep_5seeds", KL10)
    | _single("chain_sum", "experiment_chain_sum_group_sweep", KL10),
    "auto_dv0": _suite("experiment_suite_dv", "auto_dv0")
    | _single("chain_sum", "experiment_chain_sum_dv", "auto_dv0"),
    "auto_dv05": _single("chain_sum", "experiment_chain_sum_dv", "auto_dv05"),
}


def candidates_table() -> str:
    """#53's candidates side by side on the median tasks (`scripts/acceptance_53.py`)."""
    return acceptance_53.candidates_table(CANDIDATES, ROOT / "docs")


GAP_FIGURE = "docs/final_gap_by_task.png"


def _gap_reading(summary: dict, task: str | None, methods: dict[str, str]) -> dict:
    """A task's final gaps for `plot_gaps`: the members' and `auto_steps1`'s and `auto_steps2`'s, under
    the tuned table's names."""
    if task is None:
        envelope = summary["envelope"]
        entries = envelope["final_gap"]["methods"]
        gaps = {m: (entries[m]["gap_per_seed"], entries[m]["error_per_seed"]) for m in entries}
        members = envelope["members"]
    else:
        members = summary["tasks"][task]["envelope"]["members"]
        gaps = {
            m: (v["final_gap_per_seed"], v["final_gap_error_per_seed"])
            for m, entry in summary["methods"].items()
            if "final_gap_per_seed" in (v := entry["tasks"].get(task, {}).get("vs_tuned", {}))
        }
        digest = summary["tasks"][task]["envelope"]  # the baseline is no method row in a suite
        gaps[summary["baseline"]] = (
            digest["baseline_final_gap_per_seed"],
            digest["baseline_final_gap_error_per_seed"],
        )
    named = {row: gaps[name] for row, name in methods.items() if name in gaps}
    named |= {m: gaps[m] for m in members if m in gaps}
    return {
        "members": members,
        "methods": {m: {"gap_per_seed": g, "error_per_seed": e} for m, (g, e) in named.items()},
    }


def gap_figure() -> Path:
    readings = {}
    for task, _, path, key, methods, swept in TUNED_ROWS:
        if swept:
            summary = json.loads((ROOT / "docs" / path).read_text())
            readings[task] = _gap_reading(summary, key, methods)
    drawn = plot_gaps(
        readings,
        ["auto_steps1", "auto_steps2"],
        ROOT / GAP_FIGURE,
        title="final accuracy − the best of six on-policy settings' on each seed, at the same "
        "compute (bars: ±2 standard errors; grey: the other settings)",
        styles={"auto_steps1": {"color": "tab:blue"}, "auto_steps2": {"color": "tab:orange"}},
    )
    assert drawn is not None
    return drawn


# marker name: (what writes the table, the files that carry it)
BLOCKS = {
    "results-summary": (table, ("README.md", "docs/index.md", "docs/RESULTS.md")),
    "tuned-summary": (tuned_table, ("docs/methods.md", "docs/RESULTS.md")),
    "acceptance-53": (acceptance_table, ("docs/RESULTS.md",)),
    "candidates-53": (candidates_table, ("docs/RESULTS.md",)),
}


def replaced(text: str, path: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"{path}: no {start} … {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate every copy")
    action.add_argument("--check", action="store_true", help="fail if a copy differs")
    action.add_argument("--plot", action="store_true", help=f"draw {GAP_FIGURE}")
    args = parser.parse_args()
    if args.plot:
        print(gap_figure())
        return 0
    stale = []
    for name, (make, files) in BLOCKS.items():
        body = make()
        for file in files:
            path = ROOT / file
            text = path.read_text()
            new = replaced(text, file, name, body)
            if new != text:
                if args.write:
                    path.write_text(new)
                stale.append(f"{file} ({name})")
    if args.check and stale:
        print(f"stale results summary in {stale}: run python scripts/results_summary.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
