"""Archived runs: compact, restorable, and brought up to date only with the same run's keys."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llm_replay.experiments import archive as archive_module
from llm_replay.experiments.archive import ARCHIVED_METRICS, archive_run, archived_dir, restore_run


def finished_run(path: Path, summary: str = '{"final": 0.5}') -> Path:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(summary)
    records = [
        {"kind": "train", "iteration": 1, "steps": 1, "compute/mu": 0.1, "extra/key": 7.0,
         "loss/clip_fraction": float("nan")},
        {"kind": "eval", "iteration": 1, "eval/accuracy": 0.5},
    ]  # fmt: skip
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def archived_records(archive: Path) -> list[dict[str, object]]:
    text = gzip.decompress((archived_dir(archive, "m", 0) / ARCHIVED_METRICS).read_bytes())
    return [json.loads(line) for line in text.decode().splitlines()]


def test_archiving_again_adds_new_keys_from_the_same_runs_full_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = finished_run(tmp_path / "run")
    archive = tmp_path / "archive"
    assert archive_run(run, archive, "m", 0) is not None
    assert "extra/key" not in archived_records(archive)[0]
    assert archive_run(run, archive, "m", 0) is None  # nothing new: nothing written

    monkeypatch.setattr(archive_module, "TRAIN_KEYS", (*archive_module.TRAIN_KEYS, "extra/key"))
    # a run restored elsewhere from the old archive has no full log: it must not strip keys back
    restored = tmp_path / "restored"
    assert restore_run(archive, restored, "m", 0)
    assert archive_run(run, archive, "m", 0) is not None  # NaN values compare equal to themselves
    assert archived_records(archive)[0]["extra/key"] == 7.0
    assert archive_run(restored, archive, "m", 0) is None
    assert archived_records(archive)[0]["extra/key"] == 7.0


def test_another_run_under_the_same_name_is_never_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    assert archive_run(finished_run(tmp_path / "first"), archive, "m", 0) is not None
    monkeypatch.setattr(archive_module, "TRAIN_KEYS", (*archive_module.TRAIN_KEYS, "extra/key"))
    other = finished_run(tmp_path / "other", summary='{"final": 0.6}')
    assert archive_run(other, archive, "m", 0) is None
    assert "extra/key" not in archived_records(archive)[0]
    assert (archived_dir(archive, "m", 0) / "summary.json").read_text() == '{"final": 0.5}'
