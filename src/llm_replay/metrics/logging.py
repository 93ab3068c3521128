"""Run logs: one JSON object per line in `metrics.jsonl`, mirrored to TensorBoard if asked.

Each record carries `iteration` and the compute axis (`compute/seconds`), so any curve can be
drawn against compute from the JSONL alone. On resume the log is cut back to the checkpoint's
iteration so a resumed run's log equals an uninterrupted one's.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
CORRECT_ROWS = "eval_correct_rows"
"""An evaluation record's key for each eval row's greedy verdict, in the split's order ("0110…",
one character a row; `evaluation.py`). Not an `eval/` key: those are all numbers."""


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    def __init__(self, run_dir: Path, *, tensorboard: bool = False) -> None:
        self.path = run_dir / METRICS_FILE
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._tb: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, record: dict[str, Any]) -> None:
        record = {k: _clean(v) for k, v in record.items()}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        if self._tb is not None:
            step = int(record.get("iteration", 0))
            for key, value in record.items():
                if (
                    isinstance(value, int | float)
                    and not isinstance(value, bool)
                    and value is not None
                ):
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(line, record) for every complete JSON line; a torn line (a write cut short by a crash)
    or any other unparseable line is skipped, never fatal."""
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append((line, record))
    return out


def truncate_log(run_dir: Path, iteration: int) -> None:
    """Drop records after `iteration` (they belong to a run that was interrupted), atomically:
    a crash while cutting leaves the old log or the new one."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    kept = [line for line, record in _records(path) if record.get("iteration", 0) <= iteration]
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in kept))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_log(run_dir: Path) -> list[dict[str, Any]]:
    return [record for _, record in _records(Path(run_dir) / METRICS_FILE)]
