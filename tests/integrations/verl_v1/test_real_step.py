"""verl's own sync trainer step, `PPOTrainerSync.step`, driving our sampler: built by verl's
`_build_replay_buffer` from the documented config diff, with verl's real `prepare_step`, refill
(`_add_prompts_to_generate` and its `gen_batch_size` check), `_balance_batch` (padding to
lcm(data-parallel size, mini-batch × n) with `pad<hex>` rows), bypass-mode old log-probs,
`_compute_advantage` through the registered `llm_replay` estimator, and `_update_actor`. Only
the workers are stubs: an agent loop that writes finished trajectories into TransferQueue as
verl's does, and an actor worker group that records what it was asked to train."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import transfer_queue as tq
from tests.integrations.verl_v1.test_verl_config import verl_config
from tests.integrations.verl_v1.workers import (
    PROMPTS,
    ActorWorkers,
    AgentLoop,
    N,
    clear_transfer_queue,
    wire,
)
from verl.trainer.ppo.v1 import PPOTrainerSync

from llm_replay.integrations.verl import ReplaySampler
from llm_replay.methods import METHODS

pytestmark = pytest.mark.usefixtures("transfer_queue")


def build_trainer(tmp_path: Path, *extra: str, dp: int = 3) -> tuple[Any, AgentLoop, ActorWorkers]:
    config = verl_config(
        f"actor_rollout_ref.rollout.n={N}",
        f"data.train_batch_size={PROMPTS}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "trainer.total_training_steps=8",
        f"trainer.default_local_dir={tmp_path}",
        *extra,
    )
    clear_transfer_queue()
    trainer = PPOTrainerSync(config)  # builds our sampler through verl's _build_replay_buffer
    assert isinstance(trainer.replay_buffer, ReplaySampler)
    loop, workers = wire(trainer, dp=dp, lag=False)
    trainer.global_steps = 1  # as `fit` starts
    return trainer, loop, workers


def with_method(method: str) -> list[str]:
    """The documented diff with another method in place of `auto` (and verl's own loss)."""
    return [
        f"trainer.v1.sampler.sampler_kwargs.method={method}",
        "~trainer.v1.sampler.sampler_kwargs.capacity",
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
    ]


def run_steps(trainer: Any, steps: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(steps):
        metrics: dict[str, Any] = {}
        batch = trainer.step(metrics, {})
        trainer.on_step_end()  # as fit does: publishes the step's weights, waking the replicas
        out.append(metrics)
        tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)  # as fit does
        trainer.global_steps += 1
    return out


VERL_METHODS = sorted(set(METHODS) - {"rlep"})  # RLEP restarts the model, which verl does not


@pytest.mark.parametrize("method", [*VERL_METHODS, "on_policy+zero_variance"])
def test_verls_real_step_pads_and_every_padding_row_gets_a_zero_advantage(
    tmp_path: Path, method: str
) -> None:
    name, _, option = method.partition("+")
    extra = [f"+trainer.v1.sampler.sampler_kwargs.{option}.enabled=true"] if option else []
    trainer, _, workers = build_trainer(tmp_path, *with_method(name), *extra, dp=3)
    run_steps(trainer, 4)
    assert workers.updates, "the actor was never updated"
    padded = [u for u in workers.updates if any(u["padding"])]
    assert padded, "dp = 3 with mini-batch 2 × n 4 should force padding (lcm 24)"
    for update in workers.updates:
        assert len(update["keys"]) % 24 == 0
        for is_pad, uid, total in zip(
            update["padding"], update["uids"], update["advantage_sums"], strict=True
        ):
            if is_pad:
                assert uid.startswith("pad") and total == 0.0
            else:
                assert uid.startswith("llmreplay-")


@pytest.mark.parametrize("sync_steps", [1, 4])
def test_parameter_sync_step_and_the_refill_verl_accepts(tmp_path: Path, sync_steps: int) -> None:
    """`sample` is asked for train_batch_size / parameter_sync_step prompts; the sampler's
    refill (when the method composed nothing) is sized to verl's gen_batch_size, which verl's
    `_next_train_batch` checks."""
    trainer, loop, workers = build_trainer(
        tmp_path,
        *with_method("positive"),
        f"+trainer.v1.sync.parameter_sync_step={sync_steps}",
        dp=1,
    )
    assert trainer.parameter_sync_step == sync_steps
    sampler = trainer.replay_buffer
    assert sampler.refill_size(PROMPTS // sync_steps) == PROMPTS  # gen_batch_size = 4
    run_steps(trainer, 3)
    assert len(workers.updates) == 3 * sync_steps
    assert all(count % PROMPTS == 0 for count in loop.submitted)


def test_a_method_that_replays_stored_rows_gets_the_correction_checks_whatever_its_name(
    tmp_path: Path,
) -> None:
    """`on_policy` trains each row once, but zero-variance replacement replays stored groups:
    the behaviour log-probs are then required, as for any replay method."""
    no_logprobs = "actor_rollout_ref.rollout.calculate_log_probs=false"
    build_trainer(tmp_path, *with_method("on_policy"), no_logprobs)  # nothing replayed: fine
    with pytest.raises(ValueError, match=r"calculate_log_probs = False: replayed rows need"):
        build_trainer(
            tmp_path,
            *with_method("on_policy"),
            "+trainer.v1.sampler.sampler_kwargs.zero_variance.enabled=true",
            no_logprobs,
        )
