"""The speed probe's verdict on whether two runs' measured seconds can be compared (its timings
are not asserted on: a timing never decides a test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_replay.metrics.speed_probe import SpeedProbe, seconds_verdict


def test_runs_that_saw_the_same_machine_are_comparable_and_a_loaded_one_is_named() -> None:
    same = seconds_verdict({"replay": [1.0, 1.1, 0.9], "on-policy": [1.05, 1.0]})
    assert same["comparable"] is True and same["slowdown"] == pytest.approx(1.025)
    loaded = seconds_verdict({"replay": [5.0, 6.0, 5.5], "on-policy": [1.0, 1.1, 0.9]})
    assert loaded["comparable"] is False
    assert loaded["slowest"] == "replay" and loaded["slowdown"] == pytest.approx(5.5)


def test_a_verdict_needs_two_runs_with_samples_and_a_tolerance_of_at_least_one() -> None:
    assert seconds_verdict({"replay": [1.0], "on-policy": []})["comparable"] is None
    with pytest.raises(ValueError, match=r"tolerance = 0\.5"):
        seconds_verdict({"a": [1.0], "b": [1.0]}, tolerance=0.5)
    with pytest.raises(ValueError, match="interval = 0"):
        SpeedProbe(interval=0)


def test_the_probe_samples_once_on_entry_and_stops_on_exit() -> None:
    with SpeedProbe(interval=60) as probe:
        pass
    assert len(probe.samples) == 1 and probe.samples[0] > 0
    assert probe._thread is not None and not probe._thread.is_alive()


def test_the_demo_flags_its_seconds_when_the_load_changed_between_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llm_replay.cli import demo

    speeds = iter([[5.0, 5.0], [1.0, 1.0]])  # the replay run saw five times the load

    class Loaded(SpeedProbe):
        def __enter__(self) -> SpeedProbe:
            self.samples.extend(next(speeds))
            return self

    monkeypatch.setattr(demo, "SpeedProbe", Loaded)
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    demo.run_demo(tmp_path, quick=True)
    out = capsys.readouterr().out
    assert "measured seconds not comparable" in out and "5.0× slower during the replay" in out
    figures = json.loads((tmp_path / "demo.json").read_text())
    assert figures["measured_seconds"]["comparable"] is False
