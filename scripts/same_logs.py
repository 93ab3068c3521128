"""Two runs of the same experiment compared record for record: is a refactor invisible in the logs?

    python scripts/same_logs.py OUT_BEFORE OUT_AFTER

Each `metrics.jsonl` under OUT_BEFORE (an `llm-replay compare` output folder) is read beside the
one at the same place under OUT_AFTER, with the fields that measure time left out (seconds, the
measured μ, wall time): everything else (accuracy, compute counts, replay and signal metrics)
must be equal, record for record. Prints one line a run and the first differing record; exits 1
when any run differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TIMING = ("seconds", "compute/mu", "replay/mu", "wall", "time")


def records(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if not any(t in k for t in TIMING)}
        for line in lines
    ]


def main(before: Path, after: Path) -> int:
    differ = 0
    runs = sorted(p.parent.relative_to(before) for p in before.rglob("metrics.jsonl"))
    if not runs:
        print(f"{before}: no metrics.jsonl under it")
        return 1
    for run in runs:
        other = after / run / "metrics.jsonl"
        if not other.is_file():
            print(f"{run}: missing under {after}")
            differ += 1
            continue
        a, b = records(before / run / "metrics.jsonl"), records(other)
        if a == b:
            print(f"{run}: {len(a)} records, identical")
            continue
        differ += 1
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if first is None:
            print(f"{run}: {len(a)} records against {len(b)}")
            continue
        x, y = a[first], b[first]
        fields = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
        print(f"{run}: record {first} differs in {fields[:6]}")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
