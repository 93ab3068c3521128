"""The replay controller and its schedule baseline: hand-computed scales, what each signal does,
the fresh-anchored batches a scale below 1 gives, and persistence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import PositiveRetention, Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods import METHODS, OPTIONS, MethodConfigError, MethodContext, ReplayPipeline
from llm_replay.methods.options.anneal import AnnealConfig, gain_and_error, reward_gain


def fresh_round(round_: int, reward: float, nll: float = 1.0, rows: int = 8) -> RolloutBatch:
    """`rows` rollouts in groups of four, each rewarded `reward` (half correct when 0.5), every
    completion two tokens of log-prob −`nll`."""
    correct = [i % 2 == 0 if reward == 0.5 else reward > 0 for i in range(rows)]
    return RolloutBatch.from_ragged(
        prompt_ids=[[round_, i // 4] for i in range(rows)],
        completion_ids=[[1, 2]] * rows,
        behaviour_logprobs=[[-nll, -nll]] * rows,
        rewards=[float(c) if reward == 0.5 else reward for c in correct],
        advantages=[0.0] * rows,
        group_ids=[100 * round_ + i // 4 for i in range(rows)],
        policy_versions=[round_] * rows,
        correct=correct,
    )


def pipeline(method: str = "uniform", progress: float | None = 0.5, **knobs) -> ReplayPipeline:
    context = MethodContext(batch_size=4, rollouts_per_step=8, group_size=4)
    context.signals.set_progress(progress)
    settings = METHODS[method].Config(replay_ratio=3.0)
    options = {"anneal": AnnealConfig(enabled=True, **knobs)}
    return ReplayPipeline.build(method, settings, context, options)


def run_round(p: ReplayPipeline, round_: int, reward: float, nll: float = 1.0) -> list[Sample]:
    samples = list(p.batches(fresh_round(round_, reward, nll)))
    for sample in samples:
        p.observe_step(sample, {})
    return samples


def test_reward_gain_by_hand() -> None:
    assert reward_gain([0.0, 1.0, 2.0]) == pytest.approx(2.0)
    assert reward_gain([0.2, 0.2, 0.2, 0.2]) == pytest.approx(0.0)
    assert reward_gain([0.0, 0.3, 0.0, 0.3]) == pytest.approx(0.18)  # slope 0.06 over 3 gaps


def test_the_gains_standard_error_by_hand() -> None:
    """[0, 0.2, 0.1]: slope 0.1 / 2 = 0.05, fitted 0.05, 0.1, 0.15, residuals −0.05, 0.1, −0.05,
    σ² = 0.015 / (3 − 2), SE(slope) = √(0.015 / 2), both × 2 gaps."""
    gain, error = gain_and_error([0.0, 0.2, 0.1])
    assert gain == pytest.approx(0.1)
    assert error == pytest.approx(2 * (0.015 / 2) ** 0.5)
    assert gain_and_error([0.0, 1.0, 2.0]) == pytest.approx((2.0, 0.0))  # on the line
    assert gain_and_error([0.4]) == (0.0, 0.0)


def test_a_one_sided_plateau_test_does_not_press_on_noise() -> None:
    """Rewards that zig-zag around a small rise: the point estimate is below min_gain = 0.1, so
    the plain reading presses; its upper bound (z = 1.64) is not, so the test does not."""
    rewards = [0.5, 0.6, 0.45, 0.62, 0.5, 0.58]  # windows of 4: gains < 0.1, errors ~0.1
    plain = pipeline(window=4, start=0.0, rate=0.1, min_gain=0.1)
    tested = pipeline(window=4, start=0.0, rate=0.1, min_gain=0.1, plateau_z=1.64)
    for round_, reward in enumerate(rewards):
        run_round(plain, round_, reward)
        run_round(tested, round_, reward)
    assert plain.metrics()["anneal/pressed_plateau"] >= 1
    assert tested.metrics()["anneal/pressed_plateau"] == 0
    assert tested.metrics()["anneal/scale"] == 1.0


@pytest.mark.parametrize(
    ("progress", "scale", "steps"),
    [(0.1, 1.0, 6), (0.4, 0.5, 4), (0.6, 0.0, 2), (0.9, 0.0, 2)],
)
def test_the_schedule_by_hand(progress: float, scale: float, steps: int) -> None:
    """start 0.2, end 0.6: s = 1 − (p − 0.2) / 0.4; y = 1 + s·(3 − 1), y·R/B steps per round."""
    p = pipeline(progress=progress, mode="schedule", start=0.2, end=0.6)
    assert len(run_round(p, 0, 0.5)) == steps
    assert p.metrics()["anneal/scale"] == pytest.approx(scale)
    assert p.method.replay_ratio == pytest.approx(1 + 2 * scale)


def test_at_scale_zero_a_table_method_trains_on_policy_exactly() -> None:
    p = pipeline(progress=1.0, mode="schedule", start=0.0, end=0.5)
    for round_ in range(3):
        fresh = fresh_round(round_, 0.5)
        samples = list(p.batches(fresh))
        assert [len(s) for s in samples] == [4, 4]  # R/B steps of the fresh rows, each once
        trained = RolloutBatch.concat([s.to_batch() for s in samples])
        assert trained.rollouts() == fresh.rollouts()


def test_at_scale_zero_rounds_of_any_size_train_each_rollout_once_in_order(tmp_path: Path) -> None:
    """Adaptive rollouts' rounds are not multiples of B: the rows a round leaves when the credit
    runs out are carried to the next round's first batch, never topped up from the table, and
    the carry survives a save and load (issue #53: `auto` trained 4-7% replayed rows after its
    anneal ended)."""
    p = pipeline(progress=1.0, mode="schedule", start=0.0, end=0.5)
    sizes = [6, 10, 3, 4, 5, 8]
    rounds = [fresh_round(r, 0.5, rows=n) for r, n in enumerate(sizes)]
    trained: list[RolloutBatch] = []
    for r, fresh in enumerate(rounds):
        if r == 3:  # the carry (2 rows of round 2 + ...) is saved and read back mid-run
            p.save(tmp_path / "state")
            q = pipeline(progress=1.0, mode="schedule", start=0.0, end=0.5)
            q.load(tmp_path / "state")
            assert q.method.carry.tolist() == p.method.carry.tolist() != []
            p = q
        samples = list(p.batches(fresh))
        assert all(len(s) == 4 for s in samples)
        trained += [s.to_batch() for s in samples]
    every = RolloutBatch.concat(rounds).rollouts()
    done = RolloutBatch.concat(trained).rollouts()
    assert done == every[: len(done)]  # each once, in generation order, nothing from the table
    assert len(every) - len(done) == len(p.method.carry) == sum(sizes) % 4


def test_half_scale_anchors_each_batch_on_the_fresh_round() -> None:
    """s = 0.5: y = 2, so 4 steps of 4 per round of 8; each batch's first round(0.5·4) = 2 rows
    are this round's rollouts in order, the other 2 are table draws."""
    p = pipeline(progress=0.4, mode="schedule", start=0.2, end=0.6)
    run_round(p, 0, 0.5)
    fresh = fresh_round(1, 0.5)
    samples = list(p.batches(fresh))
    assert [len(s) for s in samples] == [4, 4, 4, 4]
    anchored = [r for s in samples for r in s.to_batch().select(np.arange(2)).rollouts()]
    assert anchored == fresh.rollouts()


def test_a_plateau_presses_every_round_after_the_window() -> None:
    p = pipeline(window=3, start=0.0, rate=0.1)
    for round_ in range(6):  # the same reward every round: no gain
        run_round(p, round_, 0.5)
    metrics = p.metrics()
    assert metrics["anneal/pressed_plateau"] == 4  # rounds 3..6 of 6 had a full window
    assert metrics["anneal/scale"] == pytest.approx(0.9**4)
    assert metrics["anneal/pressed_entropy"] == metrics["anneal/pressed_m2"] == 0


def test_rising_reward_and_steady_entropy_leave_replay_on() -> None:
    p = pipeline(window=3, start=0.0)
    for round_ in range(6):
        run_round(p, round_, 0.1 * round_)
    assert p.metrics()["anneal/scale"] == 1.0


def test_entropy_below_its_floor_presses() -> None:
    """Smoothed round entropy (half-life window/2 rounds) against the first round's."""
    p = pipeline(window=3, start=0.0, entropy_floor=0.6)
    nlls = [1.0, 1.0, 0.3, 0.3, 0.3, 0.3]
    for round_, nll in enumerate(nlls):
        run_round(p, round_, 0.1 * round_, nll)
    option = p.options[0]
    decay = 0.5 ** (2 / 3)
    smoothed = 1.0
    for nll in nlls[1:]:
        smoothed = decay * smoothed + (1 - decay) * nll
    assert option.entropy == pytest.approx(smoothed)
    assert p.metrics()["anneal/pressed_entropy"] >= 1
    assert p.metrics()["anneal/pressed_plateau"] == 0


def test_m2_on_the_stale_rows_presses() -> None:
    p = pipeline(window=3, start=0.0, m2_max=0.04, rate=0.1)
    for round_ in range(3):
        fresh = fresh_round(round_, 0.1 * round_)
        for sample in p.batches(fresh):
            stale = Sample.from_batch(sample.to_batch(), current_version=round_ + 5)
            p.observe_step(stale, {"loss/log_ratio_m2": 0.05})  # every row stale: m2 = 0.05
    run_round(p, 3, 0.4)
    metrics = p.metrics()  # rounds 2 and 3 had a full window and the stale rows' m2 of 0.05
    assert metrics["anneal/pressed_m2"] == 2 and metrics["anneal/pressed_plateau"] == 0
    assert metrics["anneal/scale"] == pytest.approx(0.9**2)


def test_the_start_holds_the_controller_back() -> None:
    p = pipeline(progress=0.05, window=3, start=0.1)
    for round_ in range(5):
        run_round(p, round_, 0.5)
    assert p.metrics()["anneal/scale"] == 1.0 and p.metrics()["anneal/pressed_plateau"] == 0


def test_positive_biased_replay_moves_delta_with_the_scale() -> None:
    p = pipeline("positive", progress=0.4, mode="schedule", start=0.2, end=0.6)
    run_round(p, 0, 0.5)
    remover = p.method.table.remover
    assert isinstance(remover, PositiveRetention)
    assert remover.delta == pytest.approx(0.5 * 0.5)
    assert remover.correct_capacity == round(0.25 * p.method.table.max_rollouts)


def test_refused_for_a_method_without_a_replay_scale_and_bad_knobs_are_named() -> None:
    context = MethodContext(batch_size=4, rollouts_per_step=8)
    with pytest.raises(ValueError, match="option 'anneal': not with method 'rlep'"):
        ReplayPipeline.build(
            "rlep", METHODS["rlep"].Config(), context, {"anneal": AnnealConfig(enabled=True)}
        )
    for knobs, name in [
        ({"mode": "sometimes"}, "mode"),
        ({"rate": 1.5}, "rate"),
        ({"mode": "schedule", "start": 0.5, "end": 0.4}, "end"),
        ({"window": 2}, "window"),
        ({"m2_max": 0.0}, "m2_max"),
    ]:
        with pytest.raises(MethodConfigError, match=name):
            AnnealConfig(enabled=True, **knobs).check()
    assert "anneal" in OPTIONS


def test_state_round_trips_and_restores_the_methods_scale(tmp_path: Path) -> None:
    p = pipeline(window=3, start=0.0)
    for round_ in range(5):
        run_round(p, round_, 0.5)
    p.save(tmp_path)
    q = pipeline(window=3, start=0.0)
    q.load(tmp_path)
    assert q.metrics() == p.metrics()
    assert q.method.replay_scale == p.method.replay_scale < 1.0
    run_round(p, 5, 0.5)
    run_round(q, 5, 0.5)
    assert q.metrics() == p.metrics()
    # an option's state is its `state()` as `<name>.json`; a missing one is an error
    saved = tmp_path / "options" / "anneal" / "anneal.json"
    assert set(json.loads(saved.read_text())) == set(p.options[0].state())
    saved.unlink()
    with pytest.raises(FileNotFoundError, match=r"anneal\.json"):
        pipeline(window=3, start=0.0).load(tmp_path)


def test_anneal_is_refused_by_name_on_methods_without_a_replay_scale_and_listed_so() -> None:
    """The methods page says methods without a replay scale are refused by name; the registry
    listing (`llm-replay methods --json`) and the config agree with it."""
    from llm_replay.config import ConfigError, load_config
    from llm_replay.methods import describe

    scaled = sorted(name for name, method in METHODS.items() if method.scales_replay)
    assert "on_policy" not in scaled and {"uniform", "positive"} <= set(scaled)
    listed = next(e for e in describe() if e["name"] == "anneal")
    assert listed["applies_to"] == scaled
    for name in sorted(set(METHODS) - set(scaled)):
        with pytest.raises(ConfigError, match=rf"not with method '{name}' \(it has no replay"):
            load_config(None, [f"replay.method={name}", "replay.anneal.enabled=true"])


def guarded_round(p: ReplayPipeline, round_: int, cosines: list[float]) -> int:
    """A round whose steps report `cosines` (the replay-gradient reading), one per step while
    they last."""
    steps = 0
    for sample in p.batches(fresh_round(round_, 0.5)):
        metrics = {"loss/replay_cosine": cosines.pop(0)} if cosines else {}
        p.observe_step(sample, metrics)
        steps += 1
    return steps


def guarded(**knobs) -> ReplayPipeline:  # type: ignore[no-untyped-def]
    settings = {"mode": "schedule", "start": 0.5, "end": 0.9, "guard": True, **knobs}
    return pipeline(progress=0.1, **settings)


def test_the_guard_falls_back_for_good_once_replay_credibly_stops_helping() -> None:
    """Cosines of −0.02 ± 0.01: credibly below 0 once the minimum of readings is pooled; the
    scale is 0 from the next round on, and stays 0 when later readings would say otherwise (they
    are no longer read)."""
    p = guarded(guard_min_readings=30)
    rng = np.random.default_rng(0)
    against = list(-0.02 + 0.01 * rng.normal(size=60))
    round_ = 0
    while p.metrics()["guard/readings"] < 30:
        assert p.method.replay_scale == 1.0
        guarded_round(p, round_, against)
        round_ += 1
    guarded_round(p, round_, against)
    metrics = p.metrics()
    assert metrics["guard/off"] == round_ + 1  # signals count rounds from 1
    assert p.method.replay_scale == 0.0
    assert metrics["guard/value"] + 2 * metrics["guard/error"] <= 0
    readings = metrics["guard/readings"]
    guarded_round(p, round_ + 1, [0.5] * 6)
    assert p.method.replay_scale == 0.0 and p.metrics()["guard/readings"] == readings


def test_the_guard_leaves_replay_on_when_it_helps_even_through_noisy_readings() -> None:
    helping, noise, strict = guarded(), guarded(), guarded(guard_min_cosine=0.1)
    rng = np.random.default_rng(1)
    for round_ in range(10):
        guarded_round(helping, round_, list(0.05 + 0.01 * rng.normal(size=6)))
        guarded_round(noise, round_, list(0.05 + 0.3 * rng.normal(size=6)))
        guarded_round(strict, round_, list(0.05 + 0.01 * rng.normal(size=6)))
    for p in (helping, noise):
        assert p.metrics()["guard/off"] == -1 and p.method.replay_scale == 1.0
    assert helping.metrics()["guard/value"] == pytest.approx(0.05, abs=0.01)
    assert strict.metrics()["guard/off"] >= 0  # a higher bar: helping is not enough


def test_a_step_the_head_gate_refused_is_not_pooled() -> None:
    p = guarded()
    for sample in p.batches(fresh_round(0, 0.5)):
        p.observe_step(sample, {"loss/replay_cosine": -1.0, "loss/gated": 1.0})
    assert p.metrics()["guard/readings"] == 0


def test_the_guard_asks_the_learner_for_its_reading_and_its_knobs_are_named() -> None:
    from llm_replay.config import ConfigError, load_config
    from llm_replay.runtime.components import learner_settings

    assert ("replay_cosine", "guard", True) in AnnealConfig(guard=True).learner_readings()
    assert AnnealConfig(mode="schedule").learner_readings() == []
    assert not learner_settings(load_config("auto")).replay_gradient
    assert learner_settings(load_config("auto_guard")).replay_gradient
    for knobs, name in [
        ({"guard": "yes"}, "guard"),
        ({"guard_min_cosine": 1.0}, "guard_min_cosine"),
        ({"guard_z": -0.5}, "guard_z"),
        ({"guard_min_readings": 20}, "guard_min_readings"),
    ]:
        with pytest.raises(MethodConfigError, match=name):
            AnnealConfig(enabled=True, **knobs).check()
    with pytest.raises(MethodConfigError, match=r"guard = true: .*set enabled = true"):
        AnnealConfig(guard=True).check()
    with pytest.raises(ConfigError, match=r"guard = true: not with algorithm.token_control"):
        load_config("auto_guard", ["algorithm.token_control=clip_cov"])
    for runtime in ("threaded", "ray"):
        with pytest.raises(
            ConfigError, match=f"replay.anneal.guard = true: not supported by runtime={runtime}"
        ):
            load_config("auto_guard", [f"runtime={runtime}"])


def test_the_guards_state_round_trips(tmp_path: Path) -> None:
    p = guarded()
    for round_ in range(6):
        guarded_round(p, round_, [-0.3, -0.32, -0.31, -0.3, -0.29, -0.3])
    assert p.metrics()["guard/off"] >= 0
    p.save(tmp_path)
    q = guarded()
    q.load(tmp_path)
    assert q.metrics() == p.metrics() and q.method.replay_scale == 0.0


def test_a_schedule_from_one_to_one_never_anneals_so_the_guard_acts_alone() -> None:
    p = pipeline(progress=0.999, mode="schedule", start=1.0, end=1.0, guard=True)
    run_round(p, 0, 0.5)
    assert p.method.replay_scale == 1.0
    p.signals.set_progress(1.0)
    run_round(p, 1, 0.5)
    assert p.method.replay_scale == 0.0
    with pytest.raises(MethodConfigError, match=r"end = 0\.9: must be above start = 0\.9"):
        AnnealConfig(enabled=True, mode="schedule", start=0.9, end=0.9).check()
