"""The synchronous loop end to end on the shipped tiny model, at tiny budgets."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llm_replay.buffer import Sample
from llm_replay.config.files import PRESETS_DIR
from llm_replay.metrics import read_log
from llm_replay.metrics.logging import CORRECT_ROWS
from llm_replay.runtime import SyncTrainer
from llm_replay.runtime.preference import PreferenceTrainer
from tests.conftest import tiny_config

PRESETS = sorted(PRESETS_DIR.glob("*.yaml"))
DETERMINISTIC = (
    "loss/policy",
    "loss/grad_norm",
    "reward/mean",
    "train/tokens",
    "eval/accuracy",
    "eval/pass@2",
)


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_runs_end_to_end(preset: Path, tmp_path: Path) -> None:
    config = tiny_config(preset, tmp_path / "run", "train.iterations=4")
    trainer = PreferenceTrainer if config.preference.enabled else SyncTrainer  # the sync loop
    summary = trainer(config).run()
    # a preference iteration whose candidate pairs all tie has nothing to train on, and adaptive
    # rollouts make rounds smaller than a batch
    partial = config.preference.enabled or config.generation.adaptive.enabled
    assert summary["iterations"] == 4 and summary["steps"] >= (1 if partial else 4)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in ("base_accuracy", "final_accuracy", "steps", "compute_seconds", "mu"):
        assert key in on_disk
    assert set(on_disk["compute_seconds"]) == {"total", "generation", "scoring", "training"}
    assert on_disk["compute_seconds"]["total"] > 0 and on_disk["mu"] > 0
    records = read_log(tmp_path / "run")
    train = [r for r in records if r["kind"] == "train"]
    assert [r["iteration"] for r in train] == [1, 2, 3, 4]
    assert all(r["compute/seconds"] > 0 for r in train)
    assert (tmp_path / "run" / "checkpoint" / "DONE").is_file()


def test_replay_reuses_rollouts_and_on_policy_does_not(tmp_path: Path) -> None:
    uniform = SyncTrainer(tiny_config("uniform", tmp_path / "u", "train.iterations=3"))
    uniform.run()
    log = [r for r in read_log(tmp_path / "u") if r["kind"] == "train"]
    # y = 2, R = 16, B = 16: two steps per iteration, and later iterations replay old rollouts
    assert [r["train/steps_this_iteration"] for r in log] == [2.0, 2.0, 2.0]
    assert log[-1]["train/replayed_fraction"] > 0 and log[-1]["train/age_max"] >= 1
    assert log[-1]["buffer/stored_reuse_mean"] > 0 and log[-1]["buffer/samples_per_insert"] == 2.0
    on_policy = SyncTrainer(tiny_config("on_policy", tmp_path / "o", "train.iterations=3"))
    on_policy.run()
    log = [r for r in read_log(tmp_path / "o") if r["kind"] == "train"]
    assert all(r["train/replayed_fraction"] == 0 and r["train/age_max"] == 0 for r in log)
    assert (
        on_policy.meter.counts["rollouts_trained"] == on_policy.meter.counts["rollouts_generated"]
    )


def test_every_evaluation_logs_each_rows_verdict_and_the_summary_keeps_numbers(
    tmp_path: Path,
) -> None:
    SyncTrainer(tiny_config("on_policy", tmp_path / "o", "train.iterations=2")).run()
    evals = [r for r in read_log(tmp_path / "o") if r["kind"] == "eval"]
    assert len(evals) >= 2
    for record in evals:
        rows = record[CORRECT_ROWS]
        assert set(rows) <= {"0", "1"} and len(rows) == record["eval/size"]
        assert rows.count("1") / len(rows) == pytest.approx(record["eval/accuracy"])
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert all(isinstance(v, float) for v in summary["final_eval"].values())


def test_rlep_restarts_from_base_and_blends_successes(tmp_path: Path) -> None:
    config = tiny_config(
        "rlep",
        tmp_path / "r",
        "train.iterations=4",
        "generation.prompts_per_step=8",
        "task.train_size=16",  # an epoch is two iterations: phase II revisits phase I's prompts
    )
    trainer = SyncTrainer(config)
    trainer.run()
    log = [r for r in read_log(tmp_path / "r") if r["kind"] == "train"]
    assert [r["rlep/phase"] for r in log] == [1.0, 1.0, 2.0, 2.0]
    assert log[-1]["rlep/pool_rollouts"] > 0
    assert [r["rlep/replayed_in_batch"] > 0 for r in log] == [False, False, True, True]
    # phase II batches hold the fresh G plus up to M = 2 successes per group
    assert all(r["train/rollouts"] > 32 for r in log[2:])


def _train_metrics(run_dir: Path) -> list[dict[str, float]]:
    return [
        {k: r[k] for k in DETERMINISTIC if k in r} | {"iteration": r["iteration"]}
        for r in read_log(run_dir)
    ]


def untimed_train_records(run_dir: Path) -> list[dict[str, object]]:
    """A run's training records less what depends on the clock (seconds, wall time, measured μ):
    what a resumed run must log exactly as an uninterrupted one."""
    return [
        {k: v for k, v in r.items() if "second" not in k and "wall" not in k and "mu" not in k}
        for r in read_log(run_dir)
        if r["kind"] == "train"
    ]


def run_full_and_cut(path: Path, tmp_path: Path, *extra: str) -> None:
    """Six iterations in `tmp_path/full`; in `tmp_path/cut`, three, a checkpoint, a crash, and a
    resume to six (records the interrupted process wrote after its checkpoint must not
    survive the resume)."""
    SyncTrainer(tiny_config(path, tmp_path / "full", "train.iterations=6", *extra)).run()

    class Interrupt(Exception):
        pass

    def stop_after_three(trainer: SyncTrainer, record: dict[str, object]) -> None:
        if trainer.iteration == 3:
            trainer.save_checkpoint()
            raise Interrupt

    cut = tiny_config(path, tmp_path / "cut", "train.iterations=6", *extra)
    with pytest.raises(Interrupt):
        SyncTrainer(cut).run(on_iteration=stop_after_three)
    SyncTrainer(cut).run(resume=True)


def test_same_seed_same_run(tmp_path: Path) -> None:
    for name in ("a", "b"):
        SyncTrainer(tiny_config("uniform", tmp_path / name, "train.iterations=3")).run()
    assert _train_metrics(tmp_path / "a") == _train_metrics(tmp_path / "b")


@pytest.mark.parametrize("preset", ["uniform", "prioritized", "rlep", "exgrpo"])
def test_resume_matches_uninterrupted_run(preset: str, tmp_path: Path) -> None:
    run_full_and_cut(PRESETS_DIR / f"{preset}.yaml", tmp_path)
    assert _train_metrics(tmp_path / "cut") == _train_metrics(tmp_path / "full")
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    cut = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert cut["counts"] == full["counts"] and cut["final_accuracy"] == full["final_accuracy"]


def test_keyboard_interrupt_saves_a_resumable_checkpoint(tmp_path: Path) -> None:
    def ctrl_c(trainer: SyncTrainer, record: dict[str, object]) -> None:
        if trainer.iteration == 2:
            raise KeyboardInterrupt

    config = tiny_config("on_policy", tmp_path / "r", "train.iterations=3")
    with pytest.raises(KeyboardInterrupt):
        SyncTrainer(config).run(on_iteration=ctrl_c)
    state = json.loads((tmp_path / "r" / "checkpoint" / "state.json").read_text())
    assert state["iteration"] == 2
    summary = SyncTrainer(config).run(resume=True)
    assert summary["iterations"] == 3


def test_compute_budget_stops_the_run_at_the_first_iteration_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The meter reads a clock that advances 0.05 s per reading, so every timed section costs
    exactly 0.05 s and the stopping point does not depend on the machine."""
    readings = iter(range(10**6))
    monkeypatch.setattr(
        "llm_replay.metrics.compute.time",
        SimpleNamespace(perf_counter=lambda: 0.05 * next(readings)),
    )
    config = tiny_config(None, tmp_path / "r", "train.iterations=1000", "train.compute_seconds=0.5")
    summary = SyncTrainer(config).run()
    total, iterations = summary["compute_seconds"]["total"], summary["iterations"]
    per_iteration = total / iterations
    assert 1 < iterations < 1000
    assert total >= 0.5 > total - per_iteration  # the iteration before had not reached it


def test_tensorboard_events_are_written(tmp_path: Path) -> None:
    config = tiny_config(None, tmp_path / "r", "train.iterations=1", "log.tensorboard=true")
    SyncTrainer(config).run()
    assert list((tmp_path / "r" / "tensorboard").glob("events.out.tfevents.*"))


def test_dynamic_sampling_keeps_informative_groups_and_pays_for_all(tmp_path: Path) -> None:
    config = tiny_config(
        "on_policy", tmp_path / "d", "train.iterations=2",
        "generation.dynamic_sampling=true", "generation.prompts_per_step=8", "train.batch_size=32",
    )  # fmt: skip
    trainer = SyncTrainer(config)
    trained: list[Sample] = []
    step = trainer.learner.step
    trainer.learner.step = lambda sample: trained.append(sample) or step(sample)  # type: ignore[method-assign]
    trainer.run()
    log = [r for r in read_log(tmp_path / "d") if r["kind"] == "train"]
    generated = sum(r["generation/groups_generated"] for r in log)
    assert trainer.meter.counts["prompts_generated"] == generated
    assert all(r["generation/groups_generated"] >= 8 for r in log)
    assert all(r["generation/groups_kept"] <= 8 for r in log)
    # what was trained on had a learning signal in every group
    assert trained and sum(len(s) for s in trained) == trainer.meter.counts["rollouts_trained"]
    for sample in trained:
        for group in np.unique(sample.group_ids):
            rewards = sample.rewards[sample.group_ids == group]
            assert rewards.max() > rewards.min(), f"group {group} has equal rewards {rewards}"


def test_auto_at_low_mu_trains_on_policy(tmp_path: Path) -> None:
    config = tiny_config(
        "compute_optimal",
        tmp_path / "a",
        "train.iterations=3",
        "replay.mu=0.5",
    )
    trainer = SyncTrainer(config)
    trainer.run()
    log = [r for r in read_log(tmp_path / "a") if r["kind"] == "train"]
    assert all(r["replay/auto_ratio"] == 1.0 and r["train/age_max"] == 0 for r in log)
    assert trainer.meter.counts["rollouts_trained"] == trainer.meter.counts["rollouts_generated"]
    assert log[-1]["buffer/size"] == 3 * 16  # kept for when reuse starts to pay


# auto with no μ configured reads the run's measured μ from its signals: with ρ = 0 and a long
# horizon, y = clip(μ·x, 1, max_ratio) > 1 as soon as μ is measured (the first round has none)
AUTO_MEASURED_MU = (
    "replay.mu=null",
    "replay.rho=0.0",
    "replay.rho_online=false",
    "replay.horizon=100",
)


def assert_auto_followed_the_measured_mu(run_dir: Path) -> None:
    """The first round has no μ yet (y = 1); later rounds replay at the measured μ; and the
    learner's statistics reached the method's signals at every step."""
    log = [r for r in read_log(run_dir) if r["kind"] == "train"]
    assert log[0]["replay/auto_ratio"] == 1.0
    assert any(r["replay/auto_ratio"] > 1.0 for r in log[1:]), [r["replay/auto_ratio"] for r in log]
    assert log[-1]["signals/steps"] == log[-1]["steps"]
    assert log[-1]["signals/rounds"] == len(log)
    assert np.isfinite(log[-1]["signals/kl_behaviour"]) and "signals/round_entropy" in log[-1]
    # ρ measured from the learner's behaviour KL on replayed rows, read from the signals
    assert np.isfinite(log[-1]["replay/auto_rho_per_step"])


def test_auto_with_measured_mu_replays_in_the_sync_loop(tmp_path: Path) -> None:
    config = tiny_config("compute_optimal", tmp_path, "train.iterations=3", *AUTO_MEASURED_MU)
    SyncTrainer(config).run()
    assert_auto_followed_the_measured_mu(tmp_path)


# The replay controller reading a learner statistic from its context: only the stale rows' log-ratio
# second moment can press (the learner's `loss/log_ratio_m2`, over any positive threshold); the
# entropy and plateau readings are switched off by their knobs.
ANNEAL_ON_M2 = (
    "replay.anneal.enabled=true",
    "replay.anneal.window=3",
    "replay.anneal.start=0.0",
    "replay.anneal.entropy_floor=0.0",
    "replay.anneal.min_gain=0.0",
    "replay.anneal.m2_max=1e-9",
)


def assert_anneal_read_the_learners_m2(run_dir: Path) -> None:
    log = [r for r in read_log(run_dir) if r["kind"] == "train"]
    assert log[-1]["anneal/pressed_m2"] >= 1, [r.get("anneal/pressed_m2") for r in log]
    assert log[-1]["anneal/scale"] < 1.0
    assert log[-1]["anneal/pressed_entropy"] == 0


def test_the_replay_controller_reads_a_learner_statistic_in_the_sync_loop(tmp_path: Path) -> None:
    config = tiny_config("uniform", tmp_path, "train.iterations=5", *ANNEAL_ON_M2)
    SyncTrainer(config).run()
    assert_anneal_read_the_learners_m2(tmp_path)


@pytest.mark.parametrize(("preset", "per_round"), [("on_policy", 2), ("positive", 4)])
def test_steps_per_round_trains_that_many_steps_of_each_round(
    preset: str, per_round: int, tmp_path: Path
) -> None:
    """Two steps a round of the tiny 16-rollout round: steps of 8, two a round on-policy and four
    under replay at y = 2 (the credit is y × the round)."""
    config = tiny_config(preset, tmp_path / "run", "train.iterations=3", "train.steps_per_round=2")
    assert config.train.batch_size == 8
    SyncTrainer(config).run()
    log = [r for r in read_log(tmp_path / "run") if r["kind"] == "train"]
    assert [r["steps"] for r in log] == [per_round, 2 * per_round, 3 * per_round]
