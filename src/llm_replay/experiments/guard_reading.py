"""What `replay.anneal.guard` read and did in each run of a method, for the report.

Per seed: the pooled cosine between replay's gradient and the fresh rows' at the run's end (or
when the guard fell back, after which it reads nothing), its standard error, and the share of the
run's rounds done when it fell back, and that round (None where it never did). A report says which seeds fell
back, so a saving read with the guard on is never mistaken for replay running the whole way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def guard_columns(train_logs: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """The summary's `guard` entry for a method from its seeds' training records, or {} where no
    run logs the guard."""
    seeds = []
    for records in train_logs:
        logged = [r for r in records if "guard/off" in r]
        if not logged:
            continue
        last = logged[-1]
        off = float(last["guard/off"])
        seeds.append(
            {
                "cosine": None if last.get("guard/value") is None else float(last["guard/value"]),
                "error": None if last.get("guard/error") is None else float(last["guard/error"]),
                "fell_back_round": None if off < 0 else int(off),
                "fell_back_at": None if off < 0 else off / max(len(logged), 1),
            }
        )
    if not seeds:
        return {}
    return {
        "guard": {"per_seed": seeds, "fell_back": sum(s["fell_back_at"] is not None for s in seeds)}
    }


def guard_lines(summary: dict[str, Any]) -> list[str]:
    """A line per method that ran with the guard: how many seeds fell back, when, and each
    seed's pooled cosine ± its standard error."""
    lines = []
    for name, m in summary["methods"].items():
        guard = m.get("guard")
        if not guard:
            continue
        seeds = guard["per_seed"]
        cells = []
        for s in seeds:
            reading = "—" if s["cosine"] is None else f"{s['cosine']:+.3f} ± {s['error']:.3f}"
            if s["fell_back_at"] is not None:
                reading += (
                    f" (fell back at round {s['fell_back_round']}, "
                    f"{100 * s['fell_back_at']:.0f}% of its rounds)"
                )
            cells.append(reading)
        lines.append(
            f"Guard (`replay.anneal.guard`), `{name}`: fell back to on-policy on "
            f"{guard['fell_back']} of {len(seeds)} seeds; pooled cos(replay's gradient, the "
            f"fresh rows') per seed: {'; '.join(cells)}."
        )
    return lines
