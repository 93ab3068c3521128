"""scripts/acceptance_53.py, #53's acceptance counted from the summaries: each line met only where
every seed and every task says so, and a candidate read on fewer tasks never reported as meeting
it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


TASKS = (
    "gcd",
    "products",
    "binary_alternation",
    "lcm",
    "chain_sum",
    "spell_backward",
    "palindrome_generation",
    "simple_equations",
    "count_primes",
    "countdown",
)


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "acceptance_53", ROOT / "scripts" / "acceptance_53.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def row(ratios: list[float | None], **changes: object) -> dict:
    """One task's reading of a candidate that meets every line with these per-seed ratios."""
    reading = {
        "seeds": len(ratios),
        "envelope": 0.4,
        "per_seed": ratios,
        "never": sum(r is None for r in ratios),
        "verdicts": ["better"] * len(ratios),
        "margin": 1.0,
        "calls": ["level"] * len(ratios),
        "entropy_kept": True,
        "pass_kept": True,
        "pass_raised": True,
        "entropy_kept_vs_member": True,
        "pass_kept_vs_member": True,
        "pass_raised_vs_member": True,
    }
    return reading | changes


def every_task(script: ModuleType, **changes: object) -> dict[str, dict]:
    return {task: row([0.3, 0.5, 0.9, 0.4, 0.6], **changes) for task in TASKS}


def cells(script: ModuleType, rows: dict[str, dict]) -> dict[str, str]:
    return dict(zip(script.LINES, script.cells(rows, TASKS), strict=True))


def test_a_candidate_that_meets_every_line_reads_met_on_each(script: ModuleType) -> None:
    read = cells(script, every_task(script))
    lines = script.LINES
    assert read[lines[0]] == str(len(TASKS))
    for line in lines[1:6]:
        assert read[line].endswith("**met**"), (line, read[line])
    assert read[lines[6]] == "0/50/0 of 50 seeds"
    # the tuned member's line asks the same: pass@8 raised above its interval on half the tasks
    rows = every_task(script)
    for task in list(rows)[:6]:
        rows[task] = row([0.4] * 5, pass_raised_vs_member=False)
    member = cells(script, rows)[lines[5]]
    assert "raised on 4 of 10" in member and member.endswith("not met")


def test_one_seed_over_one_or_never_there_fails_the_tail_line(script: ModuleType) -> None:
    rows = every_task(script)
    rows["lcm"] = row([0.3, 1.2, 0.9, 0.4, 0.6], verdicts=["better", "unresolved"] + ["better"] * 3)
    tail = cells(script, rows)[script.LINES[2]]
    assert tail.startswith("worst 1.20× (lcm); 1 seeds above 1×") and tail.endswith("not met")
    rows["lcm"] = row([0.3, None, 0.9, 0.4, 0.6])
    tail = cells(script, rows)[script.LINES[2]]
    assert (
        tail.startswith("a seed never reaches (lcm)")
        and "1 never reach" in tail
        and tail.endswith("not met")
    )


def test_four_seeds_on_one_task_do_not_meet_the_tail_line(script: ModuleType) -> None:
    rows = every_task(script)
    rows["gcd"] = row([0.3, 0.5, 0.9, 0.4])
    tail = cells(script, rows)[script.LINES[2]]
    assert "under 5 seeds on gcd" in tail and tail.endswith("not met")


def test_diversity_names_the_task_it_misses_and_asks_for_half_raised(script: ModuleType) -> None:
    rows = every_task(script, pass_raised=False)
    rows["chain_sum"] = row([0.4] * 5, entropy_kept=False)
    plain = cells(script, rows)[script.LINES[4]]
    assert plain.startswith("entropy below on chain_sum; pass@8 below on none, raised on 1 of 10")
    assert plain.endswith("not met")
    rows["chain_sum"] = row([0.4] * 5)  # entropy kept, but pass@8 raised on 1 of 10 only
    assert cells(script, rows)[script.LINES[4]].endswith("not met")


def test_a_candidate_read_on_some_tasks_is_never_reported_met(script: ModuleType) -> None:
    rows = {t: r for t, r in every_task(script).items() if t in ("gcd", "products", "chain_sum")}
    read = cells(script, rows)
    assert read[script.LINES[1]].startswith("0.40× over 3 of 6 tasks: not met")
    margin = read[script.LINES[3]]
    assert margin.startswith("worst +1.0 points") and "holds where read, not run on" in margin
    assert "**met**" not in " ".join(read.values())
    assert script.cells({}, TASKS) == ["not run"] * len(script.LINES)


def test_the_median_line_reads_the_suite_and_both_built_in_tasks(script: ModuleType) -> None:
    rows = every_task(script)
    for task in ("simple_equations", "count_primes", "palindrome_generation"):
        rows[task] = row([0.3] * 5, envelope=3.0)  # not among the median's tasks
    assert cells(script, rows)[script.LINES[1]].startswith("0.40× over 6 of 6")
    rows["spell_backward"] = row([0.3] * 5, envelope=0.9)
    rows["lcm"] = row([0.3] * 5, envelope=0.7)
    rows["products"] = row([0.3] * 5, envelope=0.7)  # 0.4 ×3, 0.7, 0.7, 0.9
    median = cells(script, rows)[script.LINES[1]]
    assert median.startswith("0.55× over 6 of 6 tasks: not met"), median


def suite_entry(ratios: list[float | None], *, margin: float = 1.0, entropy: bool = True) -> dict:
    """A method's task entry in a suite summary, as `llm-replay report` writes it."""
    finite = [r for r in ratios if r is not None]
    return {
        "seeds": len(ratios),
        "worst_margin": margin,
        "entropy_kept": entropy,
        "pass_kept": True,
        "pass_raised": True,
        "vs_tuned": {
            "member_ratio": 0.5,
            "ratio": sorted(finite)[len(finite) // 2],
            "ratio_per_seed": ratios,
            "never_reached_seeds": sum(r is None for r in ratios),
            "verdict_per_seed": ["unresolved"] * (len(ratios) - 1) + ["worse"],
            "final_gap": 1.0,
            "final_gap_verdict_per_seed": ["above"] + ["level"] * (len(ratios) - 1),
        },
    }


def test_candidates_table_reads_each_task_from_its_own_summary(
    script: ModuleType, tmp_path: Path
) -> None:
    summary = {
        "methods": {
            "fast": {
                "tasks": {
                    "gcd": suite_entry([0.2, 0.3, 0.4]),
                    "lcm": suite_entry([0.5, None, 0.7], margin=-2.0, entropy=False),
                }
            }
        }
    }
    (tmp_path / "s.json").write_text(json.dumps(summary))
    sources = {"fast": {t: ("s.json", t, "fast") for t in ("gcd", "lcm")}}
    table = script.candidates_table(sources, tmp_path)
    row = table.splitlines()[2].split(" | ")
    assert row[0] == "| `fast`"
    assert row[1:7] == ["0.30×", "—", "—", "0.70×", "—", "—"]
    assert row[7] == "0.50× (2)"  # the median of the two tasks read
    assert row[8] == "never (lcm)"
    assert row[9] == "2 of 6"
    assert row[10] == "-2.0 (lcm)"
    assert row[11] == "lcm"
    assert row[12] == "2/4/0 |"
    with pytest.raises(ValueError, match="no 'slow' row for gcd"):
        script.candidates_table({"slow": {"gcd": ("s.json", "gcd", "slow")}}, tmp_path)
