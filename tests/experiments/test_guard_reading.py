"""The report's reading of the guard: which seeds fell back and when, each seed's pooled cosine,
and nothing for methods that ran without it."""

from __future__ import annotations

import pytest

from llm_replay.experiments.guard_reading import guard_columns, guard_lines


def log(rounds: int, off: int, cosine: float) -> list[dict[str, float]]:
    records: list[dict[str, float]] = [{"loss/policy": 0.1}]  # a record without the guard
    for i in range(1, rounds + 1):
        fell = off if 0 <= off <= i else -1
        records.append({"guard/off": float(fell), "guard/value": cosine, "guard/error": 0.01})
    return records


def test_seeds_that_fell_back_are_named_with_when() -> None:
    columns = guard_columns([log(100, -1, 0.04), log(100, 25, -0.02)])
    guard = columns["guard"]
    assert guard["fell_back"] == 1
    assert guard["per_seed"][0] == {
        "cosine": 0.04,
        "error": 0.01,
        "fell_back_round": None,
        "fell_back_at": None,
    }
    assert guard["per_seed"][1]["fell_back_at"] == pytest.approx(0.25)
    (line,) = guard_lines({"methods": {"auto_guard": columns, "on_policy": {}}})
    assert "`auto_guard`: fell back to on-policy on 1 of 2 seeds" in line
    assert (
        "+0.040 ± 0.010" in line
        and "-0.020 ± 0.010 (fell back at round 25, 25% of its rounds)" in line
    )


def test_a_method_without_the_guard_reads_nothing() -> None:
    assert guard_columns([[{"loss/policy": 0.1}], []]) == {}
    assert guard_lines({"methods": {"on_policy": {}}}) == []
