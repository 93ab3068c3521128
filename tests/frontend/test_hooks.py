"""A trainer's own methods wrapped in place: called unchanged, heard once, wrapped once."""

from __future__ import annotations

from typing import Any

import pytest

from llm_replay.frontend.hooks import time_methods, wrap_method


class Trainer:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def update(self, batch: list[int], metrics: dict[str, float]) -> int:
        self.calls.append((batch, dict(metrics)))
        metrics["loss"] = float(sum(batch))
        return len(batch)

    def publish(self) -> None:
        raise RuntimeError("no replicas")


def test_the_wrapped_method_runs_unchanged_and_is_heard_after_it_wrote() -> None:
    trainer, heard = Trainer(), []
    assert wrap_method(trainer, "update", lambda a, k, s: heard.append((a[1]["loss"], s)))
    metrics: dict[str, float] = {}
    assert trainer.update([1, 2], metrics) == 2
    assert trainer.calls == [([1, 2], {})]
    assert metrics == {"loss": 3.0}
    assert len(heard) == 1 and heard[0][0] == 3.0 and heard[0][1] >= 0


def test_wrapping_twice_under_one_key_hears_each_call_once_and_another_key_wraps_again() -> None:
    trainer, heard, timed = Trainer(), [], []
    for _ in range(2):
        assert wrap_method(trainer, "update", lambda a, k, s: heard.append(k["metrics"]))
    assert time_methods(trainer, ["update"], timed.append) == ["update"]
    assert time_methods(trainer, ["update"], timed.append) == ["update"]  # already: no-op
    trainer.update([1], metrics={})  # as verl calls it: the metrics by keyword
    assert heard == [{"loss": 1.0}] and len(timed) == 1
    assert not wrap_method(trainer, "no_such_method", lambda a, k, s: None)


def test_a_call_that_raises_is_not_heard_and_its_error_is_the_trainers() -> None:
    trainer, seconds = Trainer(), []
    assert time_methods(trainer, ("publish", "absent", "update"), seconds.append) == [
        "publish",
        "update",
    ]
    with pytest.raises(RuntimeError, match="no replicas"):
        trainer.publish()
    trainer.update([4], {})
    assert len(seconds) == 1
