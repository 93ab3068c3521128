"""The anneal's `on_policy_batch_size`: a gradient step that follows the replay scale, from
`train.batch_size` rows while replay runs to `on_policy_batch_size` once handed to on-policy
(issue #53), by hand, exactly on-policy at its end, across a save and load, and refused where
the step is not a credit of rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.data.batch import RolloutBatch
from llm_replay.methods import METHODS, MethodConfigError, MethodContext, ReplayPipeline
from llm_replay.methods.base import TableReplay
from llm_replay.methods.options.anneal import AnnealConfig
from tests.methods.options.test_anneal import fresh_round


def pipeline(progress: float, *, handed: int | None = 8, method: str = "uniform") -> ReplayPipeline:
    """y = 3, B = 4 while replaying, `handed` rows a step at scale 0, on rounds of 8; the
    schedule anneals between 20% and 60% of the budget."""
    context = MethodContext(batch_size=4, rollouts_per_step=8, group_size=4)
    context.signals.set_progress(progress)
    settings = METHODS[method].Config(replay_ratio=3.0)
    anneal = AnnealConfig(
        enabled=True, mode="schedule", start=0.2, end=0.6, on_policy_batch_size=handed
    )
    return ReplayPipeline.build(method, settings, context, {"anneal": anneal})


@pytest.mark.parametrize(
    ("progress", "rows", "sizes"),
    [
        (0.1, 4, [4] * 6),  # s = 1: y·R = 24 rows in steps of 4
        (0.4, 6, [6, 6]),  # s = 0.5: B = 8 + 0.5·(4 − 8) = 6, y = 2: 16 rows, 2 steps, 4 carried
        (0.6, 8, [8]),  # s = 0: one step of the whole round
    ],
)
def test_the_step_follows_the_scale_by_hand(progress: float, rows: int, sizes: list[int]) -> None:
    p = pipeline(progress)
    samples = list(p.batches(fresh_round(0, 0.5)))
    assert [len(s) for s in samples] == sizes
    assert p.metrics()["anneal/step_rows"] == rows
    assert p.method.step_rows == rows


def test_unset_the_step_stays_the_trains_and_nothing_is_logged() -> None:
    p = pipeline(0.6, handed=None)
    assert [len(s) for s in p.batches(fresh_round(0, 0.5))] == [4, 4]
    assert "anneal/step_rows" not in p.metrics()


def test_handed_over_it_trains_each_rollout_once_in_order_in_the_larger_step() -> None:
    p = pipeline(1.0)
    rounds = [fresh_round(r, 0.5) for r in range(3)]
    trained = [s.to_batch() for fresh in rounds for s in p.batches(fresh)]
    assert [len(b) for b in trained] == [8, 8, 8]
    assert RolloutBatch.concat(trained).rollouts() == RolloutBatch.concat(rounds).rollouts()


def test_a_resumed_run_steps_at_the_saved_scales_size(tmp_path: Path) -> None:
    p = pipeline(0.4)
    list(p.batches(fresh_round(0, 0.5)))
    p.save(tmp_path)
    q = pipeline(0.4)
    assert q.method.step_rows == 4  # before the first round: train.batch_size
    q.load(tmp_path)
    assert q.method.step_rows == 6
    assert [len(s) for s in q.batches(fresh_round(1, 0.5))] == [
        len(s) for s in p.batches(fresh_round(1, 0.5))
    ]


def test_every_method_the_anneal_applies_to_steps_by_a_credit_of_rows() -> None:
    """`on_policy_batch_size` resizes `TableReplay`'s credit; the anneal is refused by name on
    methods without a replay scale, so every method it does apply to must be one."""
    scaled = [m for m in METHODS.values() if m.scales_replay]
    assert scaled and all(issubclass(m, TableReplay) and m.credit_steps for m in scaled)
    exgrpo = METHODS["exgrpo"](METHODS["exgrpo"].Config(), MethodContext(4, 8))
    with pytest.raises(TypeError, match="'exgrpo' does not size its steps by a credit of rows"):
        exgrpo.set_step_rows(4)


def test_compute_optimal_at_y_one_steps_at_the_resized_size() -> None:
    context = MethodContext(batch_size=4, rollouts_per_step=8, group_size=4)
    method = METHODS["compute_optimal"](METHODS["compute_optimal"].Config(mu=0.01), context)
    method.set_step_rows(8)
    assert [len(s) for s in method.batches(fresh_round(0, 0.5))] == [8]


@pytest.mark.parametrize("bad", [0, -4, 2.5, True, "128"])
def test_a_bad_size_is_named(bad: object) -> None:
    with pytest.raises(MethodConfigError, match="on_policy_batch_size"):
        AnnealConfig(enabled=True, on_policy_batch_size=bad).check()  # type: ignore[arg-type]
