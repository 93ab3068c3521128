"""Run logs: one JSON object per line in `metrics.jsonl`, mirrored to TensorBoard if asked.

Each record carries `iteration` and the compute axis (`compute/seconds`), so any curve can be
drawn against compute from the JSONL alone. On resume the log is cut back to the checkpoint's
iteration so a resumed run's log equals an uninterrupted one's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


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


def truncate_log(run_dir: Path, iteration: int) -> None:
    """Drop records after `iteration` (they belong to a run that was interrupted)."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line).get("iteration", 0) <= iteration
    ]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def read_log(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
