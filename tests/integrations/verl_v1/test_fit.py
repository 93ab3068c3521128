"""verl's own training loop, `PPOTrainer.fit`, in all three of its modes, driving our sampler.

The trainer is verl's (`PPOTrainerSync`, `PPOTrainerColocateAsync`, `PPOTrainerSeparateAsync`),
built from the documented config diff: its `fit` with its hooks (async warm-up batches, weight
publishing, replica sleep/abort/resume), `step` and `_step_once` (refills, `_balance_batch`
padding, bypass-mode old log-probs, `_compute_advantage` through our estimator,
`_update_actor`), `_compute_metrics`, `_save_checkpoint` (with TransferQueue's own checkpoint in
the async modes and our `ReplayCheckpointCallback`) and `_load_checkpoint` with the re-issue of
in-flight prompts. Only the workers are stubs (`workers.py`); in the async modes a group
finishes a step after it was submitted, under newer weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import transfer_queue as tq
from tests.integrations.verl_v1.test_real_step import VERL_METHODS
from tests.integrations.verl_v1.test_verl_config import verl_config
from tests.integrations.verl_v1.workers import (
    PROMPTS,
    TRAIN,
    N,
    clear_transfer_queue,
    wire,
)
from verl.trainer.ppo.v1 import PPOTrainerColocateAsync, PPOTrainerSeparateAsync, PPOTrainerSync

from llm_replay.integrations.verl import ReplaySampler
from llm_replay.integrations.verl.advantages import UID_PREFIX
from llm_replay.integrations.verl.sampler import AsyncReplaySampler

pytestmark = pytest.mark.usefixtures("transfer_queue")

TRAINERS = {
    "sync": PPOTrainerSync,
    "colocate_async": PPOTrainerColocateAsync,
    "separate_async": PPOTrainerSeparateAsync,
}
MODE_SETTINGS = {
    "sync": [],
    # verl's _init_dataloader (not run here: no dataset files) forces gen_batch_size = 1 in the
    # async modes; separate_async needs train_batch_size = parameter_sync_step × mini-batch and
    # a standalone rollout pool
    "colocate_async": ["+data.gen_batch_size=1"],
    "separate_async": [
        "+data.gen_batch_size=1",
        "actor_rollout_ref.hybrid_engine=false",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
    ],
}


def build(
    tmp_path: Path,
    mode: str,
    method: str,
    *extra: str,
    steps: int = 4,
    sync_steps: int = 1,
    fail_every: int = 0,
) -> tuple[Any, Any, Any]:
    """verl's trainer for `mode`; in separate_async, `sync_steps` updates a step (verl requires
    train_batch_size = parameter_sync_step × ppo_mini_batch_size there); in sync mode
    `sync_steps` > 1 is `trainer.v1.sync.parameter_sync_step`. `fail_every`: every this many
    prompts, a session fails (verl's `failure` status with the sessions that finished)."""
    separate = mode == "separate_async"
    config = verl_config(
        f"trainer.v1.trainer_mode={mode}",
        f"actor_rollout_ref.rollout.n={N}",
        f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS // sync_steps if separate else 2}",
        *([f"trainer.v1.separate_async.parameter_sync_step={sync_steps}"] if separate else []),
        *([f"+trainer.v1.sync.parameter_sync_step={sync_steps}"] if mode == "sync" else []),
        f"trainer.total_training_steps={steps}",
        f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
        "trainer.logger=[]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=2",
        f"trainer.v1.sampler.sampler_kwargs.method={method}",
        "~trainer.v1.sampler.sampler_kwargs.capacity",
        "actor_rollout_ref.actor.policy_loss.loss_mode=llm_replay_tis",
        *MODE_SETTINGS[mode],
        *extra,
    )
    trainer = TRAINERS[mode](config)  # builds our sampler through verl's _build_replay_buffer
    loop, workers = wire(trainer, dp=3, lag=mode != "sync", fail_every=fail_every)
    return trainer, loop, workers


def trained(workers: Any) -> list[list[tuple[tuple[int, ...], float]]]:
    """Each update's real rows, as (response tokens, advantage), in order."""
    return [
        [
            (response, advantage)
            for response, advantage, pad in zip(
                u["responses"], u["advantage_sums"], u["padding"], strict=True
            )
            if not pad
        ]
        for u in workers.updates
    ]


def issued_rows_left() -> list[str]:
    listed = tq.kv_list(TRAIN) or {}
    return [key for key in listed.get(TRAIN, {}) if key.startswith(UID_PREFIX)]


class Logged:
    """verl's `Tracking` as `fit` uses it: every step's metrics, kept."""

    steps: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Logged.steps = []

    def log(self, data: dict[str, Any], step: int) -> None:
        Logged.steps.append(dict(data))


@pytest.fixture(autouse=True)
def logged(monkeypatch: pytest.MonkeyPatch) -> type[Logged]:
    monkeypatch.setattr("verl.trainer.ppo.v1.trainer_base.Tracking", Logged)
    clear_transfer_queue()
    return Logged


def ages(workers: Any, per_step: int, first_step: int = 1) -> list[int]:
    """Every row trained from `first_step` on: how far the weights it started from are behind
    the step's."""
    out = []
    for i, update in enumerate(workers.updates):
        step = i // per_step + 1
        if step >= first_step:
            out += [step - 1 - v for v in update["min_global_steps"] if v is not None]
    return out


@pytest.mark.parametrize("mode", list(TRAINERS))
def test_fit_trains_with_replay_in_every_mode_and_pads(tmp_path: Path, mode: str) -> None:
    per_step = 2 if mode == "separate_async" else 1  # parameter_sync_step
    trainer, loop, workers = build(tmp_path, mode, "positive", sync_steps=per_step)
    sampler = trainer.replay_buffer
    assert isinstance(sampler, ReplaySampler)
    assert isinstance(sampler, AsyncReplaySampler) == (mode != "sync")
    trainer.fit(loop)
    assert len(workers.updates) == 4 * per_step
    for update in workers.updates:
        assert len(update["keys"]) % 24 == 0  # lcm(dp 3, mini-batch 2 × n 4): padded
        for pad, uid, total in zip(
            update["padding"], update["uids"], update["advantage_sums"], strict=True
        ):
            assert (uid.startswith("pad") and total == 0.0) if pad else uid.startswith(UID_PREFIX)
    logged = Logged.steps
    assert len(logged) == 4
    assert sum(m["llm_replay/replayed_rows"] for m in logged) > 0
    assert all("training/off_policy/trajectory_staleness/mean" in m for m in logged)
    host = sampler.host
    assert host is not None and host.signals.steps > 0  # verl's actor statistics reached it
    assert host.signals.mean("clip_fraction") is None  # tis truncates: no clip, as in our loop
    assert host.signals.mean("kl_behaviour") > 0  # bypass: against the behaviour policy
    assert host.signals.mean("entropy") is None  # bypass, calculate_entropy off: none computed
    if mode == "sync":
        assert logged[-1]["llm_replay/mu"] > 0  # measured: the step waits for its rollouts
        assert max(ages(workers, per_step)) >= 1  # replayed rows are older
    else:
        assert "llm_replay/mu" not in logged[-1]  # generation overlaps training: not measured
        spans = [m["training/off_policy/trajectory_spans/max"] for m in logged]
        assert max(spans) == 2  # a group started under one version, finished under the next
        # the warm-up batch trains at step 1; from then on every group is a step behind
        assert min(ages(workers, per_step, first_step=2)) >= 1
    assert not issued_rows_left()


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
@pytest.mark.parametrize("method", [*VERL_METHODS, "on_policy+zero_variance"])
def test_every_method_verl_accepts_runs_through_fit_in_the_async_modes(
    tmp_path: Path, mode: str, method: str
) -> None:
    name, _, option = method.partition("+")
    extra = [f"+trainer.v1.sampler.sampler_kwargs.{option}.enabled=true"] if option else []
    if name == "compute_optimal":
        extra.append("+trainer.v1.sampler.sampler_kwargs.mu=4")  # not measured in async modes
    per_step = 2 if mode == "separate_async" else 1
    trainer, loop, workers = build(tmp_path, mode, name, *extra, steps=2, sync_steps=per_step)
    trainer.fit(loop)
    assert len(workers.updates) >= 2 * per_step
    for update in workers.updates:
        assert len(update["keys"]) % 24 == 0
        assert all(
            (uid.startswith("pad") and total == 0.0) if pad else uid.startswith(UID_PREFIX)
            for pad, uid, total in zip(
                update["padding"], update["uids"], update["advantage_sums"], strict=True
            )
        )
    assert len(Logged.steps) == 2
    assert not issued_rows_left()


def test_async_staleness_verls_threshold_bounds_fresh_groups_the_methods_max_age_replay(
    tmp_path: Path,
) -> None:
    """verl drops a fresh group whose prompt spans more than `max_off_policy_threshold` steps
    before the method sees it; the method's `max_age` bounds how old a replayed row may be."""
    trainer, loop, workers = build(
        tmp_path,
        "colocate_async",
        "uniform",
        "trainer.v1.sampler.max_off_policy_threshold=1",
        # in optimizer steps (clock.py): 32 rows a step in mini-batches of 8, four a step, so
        # two verl steps
        "+trainer.v1.sampler.sampler_kwargs.max_age=8",
        "+trainer.v1.sampler.sampler_kwargs.replay_ratio=2",
        steps=6,
    )
    trainer.fit(loop)
    dropped = [m.get("training/off_policy/evicted_samples", 0) for m in Logged.steps]
    assert sum(dropped) > 0  # the lagged groups span 2 steps > 1: verl dropped them
    assert max(ages(workers, 1)) <= 2
    assert sum(m["llm_replay/replayed_rows"] for m in Logged.steps) > 0


def test_compute_optimal_replays_at_the_mu_measured_from_verls_sync_step(tmp_path: Path) -> None:
    """In sync mode the sampler times verl's wait for the step's rollouts and its
    `_update_actor`, and the method reads that μ (no `mu` given)."""
    trainer, loop, _ = build(tmp_path, "sync", "compute_optimal")
    sampler = trainer.replay_buffer
    trainer.fit(loop)
    counts = sampler.meter.counts
    assert counts["rollouts_generated"] == 4 * PROMPTS * N  # fresh rows, padding left out
    assert counts["rollouts_trained"] >= counts["rollouts_generated"]
    seen = sampler.host.signals.mu  # the last round's: μ after its generation, before its update
    assert seen is not None
    assert Logged.steps[-1]["llm_replay/mu"] == pytest.approx(seen)  # verl averages step metrics
    assert sampler.meter.mu is not None


def test_the_weight_sync_a_step_pays_is_charged_to_generation_in_mu(tmp_path: Path) -> None:
    """The wait for a step's rollouts does not see verl publishing the weights to the replicas
    (`on_step_end`) or draining them (`on_sample_end`): the sampler times both as generation."""
    trainer, loop, _ = build(tmp_path, "sync", "positive")
    trainer.checkpoint_manager.sync_seconds = 0.2
    trainer.fit(loop)
    # four steps' publishes; the stub generates at once, so without them generation costs ~0
    assert trainer.replay_buffer.meter.seconds["generation"] >= 4 * 0.2


def test_compute_optimal_needs_mu_given_in_the_async_modes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"sampler_kwargs\.mu: .* generation overlaps training"):
        build(tmp_path, "colocate_async", "compute_optimal")
    trainer, _, _ = build(
        tmp_path, "colocate_async", "compute_optimal", "+trainer.v1.sampler.sampler_kwargs.mu=4"
    )
    assert isinstance(trainer.replay_buffer, AsyncReplaySampler)


@pytest.mark.parametrize("mode", list(TRAINERS))
def test_kill_and_resume_through_fit_trains_what_an_uninterrupted_run_trains(
    tmp_path: Path, mode: str
) -> None:
    """Run A trains 4 steps, checkpointing at 2; run B, a new trainer in a fresh TransferQueue,
    resumes from A's step-2 checkpoint (verl's `_load_checkpoint`: weights, dataloader, and in
    the async modes TransferQueue, whose in-flight prompts verl re-issues) and trains steps 3-4.
    The sampler's state comes back whole, and B trains the rows A trained.

    One update a step: with several, verl hands each update the oldest groups, and among
    groups equally old it picks by uid (random uuids), so which of a step's groups go to which
    update differs between any two runs, interrupted or not."""
    per_step = 1
    a, loop_a, workers_a = build(tmp_path / "a", mode, "positive")
    a.fit(loop_a)
    checkpoint = tmp_path / "a" / "checkpoints" / "global_step_2"
    assert (checkpoint / "llm_replay" / "sampler.json").is_file()
    clear_transfer_queue()
    b, loop_b, workers_b = build(
        tmp_path / "a",
        mode,
        "positive",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    assert b.global_steps == 2
    b.fit(loop_b)
    assert len(workers_b.updates) == 2 * per_step
    assert trained(workers_b) == trained(workers_a)[2 * per_step :]
    assert b.replay_buffer.steps == a.replay_buffer.steps
    assert not issued_rows_left()
