"""Issue #53's acceptance, line by line, counted from the archived experiment summaries.

Each stop of #53 reported its acceptance as a table assembled by hand from the sections of
docs/RESULTS.md. This reads it from the same `summary.json` files the tuned table reads
(`scripts/results_summary.py`, which carries it into docs/RESULTS.md between the
`acceptance-53` markers and checks it in `make test`): per candidate, the median compute to
on-policy's final accuracy against the tuned envelope over the suite's four gain tasks and both
built-in tasks; the worst seed, the seeds that never reach and those resolved worse at the
evaluations' resolution; the worst margin against on-policy's band; entropy and pass@8 against
plain on-policy's interval and the tuned member's; and, outside the acceptance, the final gap to
the best member. A line is met only where every task says so: a candidate not run on some of
the tasks is reported as holding where it was read, never as meeting the line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llm_replay.experiments.analysis import median_or_none
from llm_replay.experiments.final_gap import VERDICTS as GAP_CALLS
from llm_replay.experiments.suite_stats import PASS_KEY, kept, raised
from llm_replay.experiments.tuned_member import DIVERSITY_COUNTED as _MEMBER_KEYS
from llm_replay.experiments.tuned_member import member_diversity


def ratio_text(value: float | None) -> str:
    """ "0.42×", or "not reached" for a ratio that has none."""
    return "not reached" if value is None else f"{value:.2f}×"


# #53's median line reads the suite's four tasks where on-policy gains and both built-in tasks
MEDIAN_TASKS = ("gcd", "products", "binary_alternation", "lcm", "chain_sum", "spell_backward")
SEEDS = 5  # the worst-seed line asks for at least this many seeds per task


def reading(summary: dict, task: str | None, method: str) -> dict | None:
    """What #53's acceptance and the tuned table read of one method on one task (`task`: its name
    in a suite's summary, None for a single experiment's): its ratio to the envelope's compute
    (median, per seed, never reached, each seed's verdict at the evaluations' resolution) and to
    the tuned member's, its worst margin against on-policy's band, its final gaps (median and
    verdicts), and its entropy and pass@8 against plain on-policy's interval and the tuned
    member's. None where the method has no row."""
    if task is not None:
        entry = summary["methods"].get(method, {}).get("tasks", {}).get(task)
        if entry is None:
            return None
        tuned = entry["vs_tuned"]
        return {
            "seeds": entry["seeds"],
            "member": tuned["member_ratio"],
            "envelope": tuned["ratio"],
            "per_seed": tuned["ratio_per_seed"],
            "never": tuned["never_reached_seeds"],
            "verdicts": tuned.get("verdict_per_seed") or [],
            "margin": entry["worst_margin"],
            "gap": tuned.get("final_gap"),
            "calls": tuned.get("final_gap_verdict_per_seed"),
            "entropy_kept": entry["entropy_kept"],
            "pass_kept": entry["pass_kept"],
            "pass_raised": entry["pass_raised"],
            **{k: tuned.get(k) for k in _MEMBER_KEYS},
        }
    methods = summary["methods"]
    if method not in methods:
        return None
    envelope = summary["envelope"]
    ratio = envelope["methods"][method]["baseline_final"]
    mine, base = methods[method], methods[summary["baseline"]]
    member = methods[envelope["tuned_member"]["member"]["mu_5"]]
    gap = envelope.get("final_gap", {}).get("methods", {}).get(method, {})
    return {
        "seeds": mine["seeds"],
        "member": envelope["tuned_member"]["methods"][method]["ratio"]["mu_5"],
        "envelope": ratio["ratio"]["mu_5"],
        "per_seed": ratio["ratio_per_seed"]["mu_5"],
        "never": ratio["never_reached_seeds"]["mu_5"],
        "verdicts": envelope["resolution"]["methods"][method]["verdict_per_seed"]["mu_5"],
        "margin": mine["worst_margin_mu_5"],
        "gap": gap.get("median_gap"),
        "calls": gap.get("verdict_per_seed"),
        "entropy_kept": kept(mine.get("entropy"), base.get("entropy")),
        "pass_kept": kept(mine.get(PASS_KEY), base.get(PASS_KEY)),
        "pass_raised": raised(mine.get(PASS_KEY), base.get(PASS_KEY)),
        **member_diversity(mine, member),
    }


def _worst(per_seed: list[float | None]) -> float:
    """The largest of a method's per-seed ratios on a task, a seed that never reached as inf."""
    return max(math.inf if r is None else r for r in per_seed)


def _where(rows: dict[str, dict], key: str, value: object) -> list[str]:
    return [task for task, r in rows.items() if r[key] is value]


def _listed(tasks: list[str]) -> str:
    return ", ".join(tasks) if tasks else "none"


def _met(ok: bool, missing: Sequence[str] = ()) -> str:
    """ "**met**", "not met", or, where the candidate was not run on some of the tasks
    (`missing`), that it holds only where it was read."""
    if not ok:
        return "not met"
    return f"holds where read, not run on {_listed(list(missing))}" if missing else "**met**"


@dataclass(frozen=True)
class Counts:
    """What both tables count over one candidate's readings by task: its worst seed and task, the
    seeds resolved worse out of those read, its worst margin and task, and its final-gap calls."""

    worst_task: str
    worst: float
    worse: int
    seeds: int
    margin_task: str
    margin: float
    calls: list[str]

    @classmethod
    def of(cls, rows: dict[str, dict]) -> Counts:
        worst_task = max(rows, key=lambda t: _worst(rows[t]["per_seed"]))
        margin_task = min(rows, key=lambda t: rows[t]["margin"])
        return cls(
            worst_task=worst_task,
            worst=_worst(rows[worst_task]["per_seed"]),
            worse=sum(r["verdicts"].count("worse") for r in rows.values()),
            seeds=sum(len(r["verdicts"]) for r in rows.values()),
            margin_task=margin_task,
            margin=rows[margin_task]["margin"],
            calls=[c for r in rows.values() for c in (r["calls"] or ())],
        )

    def gap_calls(self) -> str:
        """ "5/20/0": the seeds above / level / below the best member."""
        return "/".join(str(self.calls.count(c)) for c in GAP_CALLS)


def cells(rows: dict[str, dict], tasks: Sequence[str]) -> list[str]:
    """One candidate's cell per line of `LINES` from its readings by task (`reading`), among
    `tasks`, the tasks every candidate is asked to be read on."""
    if not rows:
        return ["not run"] * len(LINES)
    missing = [t for t in tasks if t not in rows]
    median = median_or_none([rows[t]["envelope"] for t in MEDIAN_TASKS if t in rows])
    median_read = [t for t in MEDIAN_TASKS if t in rows]
    median_cell = f"{ratio_text(median)} over {len(median_read)} of {len(MEDIAN_TASKS)} tasks: " + (
        _met(median is not None and median <= 0.5 and len(median_read) == len(MEDIAN_TASKS))
    )
    n = Counts.of(rows)
    never = sum(r["never"] for r in rows.values())
    few = [t for t, r in rows.items() if r["seeds"] < SEEDS]
    above_one = sum(_worst([x]) > 1.0 for r in rows.values() for x in r["per_seed"])
    tail_cell = (
        ("a seed never reaches" if math.isinf(n.worst) else f"worst {ratio_text(n.worst)}")
        + f" ({n.worst_task}); {above_one} seeds "
        f"above 1× and {never} never reach; {n.worse} of {n.seeds} resolved worse"
        + (f"; under {SEEDS} seeds on {_listed(few)}" if few else "")
        + f": {_met(n.worst <= 1.0 and not few, missing)}"
    )
    margin_cell = f"worst {n.margin:+.1f} points ({n.margin_task}): {_met(n.margin >= 0, missing)}"
    plain = _diversity_cell(rows, missing, "entropy_kept", "pass_kept", "pass_raised")
    member = _diversity_cell(rows, missing, *_MEMBER_KEYS)
    gaps = f"{n.gap_calls()} of {len(n.calls)} seeds" if n.calls else "—"
    return [f"{len(rows)}", median_cell, tail_cell, margin_cell, plain, member, gaps]


def _diversity_cell(
    rows: dict[str, dict], missing: Sequence[str], entropy: str, passes: str, raised_: str
) -> str:
    """ "entropy below on chain_sum; pass@8 below on none, raised on 5 of 10: not met"."""
    low_entropy = _where(rows, entropy, False)
    low_pass = _where(rows, passes, False)
    unread = [t for t, r in rows.items() if r[entropy] is None or r[passes] is None]
    up = len(_where(rows, raised_, True))
    ok = not low_entropy and not low_pass and not unread and 2 * up >= len(rows)
    return (
        f"entropy below on {_listed(low_entropy)}; {PASS_KEY} below on {_listed(low_pass)}, "
        f"raised on {up} of {len(rows)}"
        + (f"; not measured on {_listed(unread)}" if unread else "")
        + f": {_met(ok, missing)}"
    )


LINES = (
    "tasks read",
    "median compute to on-policy's final accuracy ≤ 0.5× of the tuned envelope's (the suite's "
    "four gain tasks and both built-in tasks; μ = 5)",
    f"at ≥ {SEEDS} seeds the worst seed ≤ 1.0× of the envelope on every task, none "
    "that never reaches (raw ratios; resolved: at the evaluations' resolution)",
    "never below on-policy's band after the first tenth (worst margin over tasks)",
    f"entropy and {PASS_KEY} at or above plain on-policy's interval on every task, {PASS_KEY} "
    "above it on half",
    "the same against the tuned member's interval",
    "(not in the acceptance) final accuracy against the best member's at the same compute: seeds "
    "above / level / below",
)


def table(tuned_rows: Sequence[tuple], docs: Path, candidates: Sequence[str]) -> str:
    """The Markdown table: a column per candidate (a key of each tuned row's methods), a row per
    line of `LINES`, read from the summaries under `docs` that `tuned_rows` name (those of
    `scripts/results_summary.py`: task, kind, summary path, task in a suite or None, methods,
    swept)."""
    tasks = [row[0] for row in tuned_rows]
    rows: dict[str, dict[str, dict]] = {c: {} for c in candidates}
    for task, _, path, key, methods, _ in tuned_rows:
        summary = json.loads((docs / path).read_text())
        for candidate in candidates:
            if candidate in methods:
                read = reading(summary, key, methods[candidate])
                if read is not None:
                    rows[candidate][task] = read
    columns = [cells(rows[c], tasks) for c in candidates]
    lines = [
        "| #53's line | " + " | ".join(f"`{c}`" for c in candidates) + " |",
        "|---|" + "---|" * len(candidates),
    ]
    for i, line in enumerate(LINES):
        lines.append(f"| {line} | " + " | ".join(column[i] for column in columns) + " |")
    return "\n".join(lines)


SHORT = {
    "gcd": "gcd",
    "products": "products",
    "binary_alternation": "bin_alt",
    "lcm": "lcm",
    "chain_sum": "chain_sum",
    "spell_backward": "spell",
}


def candidates_table(sources: Mapping[str, Mapping[str, tuple]], docs: Path) -> str:
    """A row per candidate of #53, a column per median task and per counted line: each task's
    median compute to on-policy's final accuracy against the envelope of the experiment that ran
    it, the median over the tasks read, the worst seed, the seeds resolved worse, the worst margin
    against on-policy's band, where entropy falls under plain on-policy's interval, and the seeds
    that end above / level / below the best member. `sources`: candidate → task → (summary path
    under `docs`, its task in a suite summary or None, the candidate's row name there)."""
    head = (
        "| candidate | "
        + " | ".join(SHORT[t] for t in MEDIAN_TASKS)
        + " | median (tasks read) | worst seed | resolved worse | worst margin | entropy under "
        "plain on-policy's interval | final vs best member (above/level/below) |"
    )
    lines = [head, "|---|" + "---|" * (len(MEDIAN_TASKS) + 6)]
    cache: dict[str, dict] = {}
    for candidate, tasks in sources.items():
        rows: dict[str, dict] = {}
        for task, (path, key, method) in tasks.items():
            summary = cache.setdefault(path, json.loads((docs / path).read_text()))
            read = reading(summary, key, method)
            if read is None:
                raise ValueError(f"{path}: no {method!r} row for {task}")
            rows[task] = read
        ratios = [ratio_text(rows[t]["envelope"]) if t in rows else "—" for t in MEDIAN_TASKS]
        median = median_or_none([rows[t]["envelope"] for t in MEDIAN_TASKS if t in rows])
        n = Counts.of(rows)
        lines.append(
            f"| `{candidate}` | "
            + " | ".join(ratios)
            + f" | {ratio_text(median)} ({len(rows)}) | "
            + ("never" if math.isinf(n.worst) else ratio_text(n.worst))
            + f" ({SHORT.get(n.worst_task, n.worst_task)}) | {n.worse} of {n.seeds} | "
            f"{n.margin:+.1f} ({SHORT.get(n.margin_task, n.margin_task)}) | "
            + (", ".join(SHORT.get(t, t) for t in _where(rows, "entropy_kept", False)) or "none")
            + f" | {n.gap_calls() if n.calls else '—'} |"
        )
    return "\n".join(lines)
