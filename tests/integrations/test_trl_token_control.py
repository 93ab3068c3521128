"""Token controls inside ReplayGRPOTrainer: the same gradient as our own loss with the same control,
KL-Cov's term reduced as TRL reduces its loss for every allowed loss type, and the covariance
logged under TRL as in our loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tests.integrations.test_trl import build, settings
from trl import GRPOTrainer

from llm_replay.algorithms.losses import build_loss, policy_loss
from llm_replay.algorithms.token_control import TokenControl
from llm_replay.frontend.token_control import (
    BEHAVIOUR_KEY,
    RAW_ADVANTAGES_KEY,
    REUSED_KEY,
    WEIGHTS_KEY,
)
from llm_replay.integrations.trl import ReplayGRPOConfig, ReplayGRPOTrainer
from llm_replay.integrations.trl.token_control import LOSS_TYPES, trl_aggregate


class Captured(ReplayGRPOTrainer):
    """Keeps a copy of every micro-batch TRL's loss was handed."""

    seen: list[dict[str, Any]]

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        self.seen = [*getattr(self, "seen", []), dict(inputs)]
        return super()._compute_loss(model, inputs)


def trained_trainer(tmp_path: Path, **extra: Any) -> Captured:
    """A trainer after `max_steps` (default 1) steps, its model in training mode."""
    config = ReplayGRPOConfig(**settings(tmp_path, **{"max_steps": 1, **extra}))
    trainer = build(config, Captured)
    trainer.train()
    trainer.model.train()
    return trainer


def logprobs(trainer: ReplayGRPOTrainer, inputs: dict[str, Any]) -> torch.Tensor:
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    out, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(
        trainer, trainer.model, ids, mask, inputs["completion_ids"].size(1)
    )
    return out  # type: ignore[no-any-return]


def gradient(trainer: ReplayGRPOTrainer, loss: torch.Tensor) -> torch.Tensor:
    trainer.model.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    grads = [p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]
    return torch.cat(grads)


# ---------------------------------------------------------------------- TRL's normalisers
@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_the_kl_cov_term_is_reduced_as_trl_reduces_its_loss(
    tmp_path: Path, loss_type: str, accumulation: int
) -> None:
    """On-policy rows with no ratio: TRL's per-token loss is −A (−A·log π for CISPO), so TRL's
    own loss must equal `trl_aggregate` of it for each loss type and accumulation."""
    extra: dict[str, Any] = {"loss_type": loss_type, "gradient_accumulation_steps": accumulation}
    if accumulation > 1:
        extra["per_device_train_batch_size"] = 8
    trainer = trained_trainer(tmp_path, **extra)
    inputs = dict(trainer.seen[-1])
    inputs.pop("old_per_token_logps", None)
    rows = len(inputs["advantages"])  # group advantages sum to 0; these do not
    inputs["advantages"] = torch.linspace(0.1, 1.0, rows) * (1 + inputs["completion_mask"][:, 0])
    with torch.no_grad():
        theirs = GRPOTrainer._compute_loss(trainer, trainer.model, inputs)
        per_token = -inputs["advantages"][:, None].expand_as(inputs["completion_mask"]).float()
        if loss_type == "cispo":  # the ratio (1) clamped at epsilon_high, times log π
            per_token = per_token * min(1.0, trainer.epsilon_high) * logprobs(trainer, inputs)
        ours = trl_aggregate(
            per_token,
            inputs["completion_mask"].float(),
            loss_type=loss_type,
            accumulation=trainer.current_gradient_accumulation_steps,
            max_completion_length=trainer.max_completion_length,
            items=inputs["num_items_in_batch"],
            processes=1,
            steps_per_generation=trainer.args.steps_per_generation,
        )
    assert trainer.current_gradient_accumulation_steps == accumulation
    assert abs(float(theirs)) > 1e-4  # not a comparison of zeros
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_unknown_loss_types_are_refused() -> None:
    with pytest.raises(ValueError, match="loss_type = 'sapo'"):
        trl_aggregate(
            torch.ones(2, 3), torch.ones(2, 3), loss_type="sapo", accumulation=1,
            max_completion_length=3, items=None, processes=1, steps_per_generation=1,
        )  # fmt: skip


# ---------------------------------------------------------------------- the same as our learner
CONTROLS = {
    "kl_cov": {"mode": "kl_cov", "fraction": 0.3, "coef": 1.0, "rows": "all"},
    "clip_cov": {"mode": "clip_cov", "fraction": 0.3, "rows": "all", "low": -50.0, "high": 50.0},
    "positive_weight": {"positive_weight": 0.1, "rows": "all"},
}
LOSSES = {  # TRL side: replay_loss and its fields; our side: the loss it stands for
    "asymre": ({"replay_loss": "asymre", "scale_rewards": "none"}, "asymre"),
    "ppo_clip": ({"replay_loss": "trl"}, "grpo"),
}


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_control_gives_our_learners_gradient(tmp_path: Path, name: str, loss: str) -> None:
    """One micro-batch: the gradient of TRL's loss with the control equals the gradient of our
    `policy_loss` with the same `TokenControl` on the same log-probs, and differs from the
    gradient without it."""
    fields, ours_name = LOSSES[loss]
    control = CONTROLS[name]
    trainer = trained_trainer(tmp_path, replay_token_control=control, **fields)
    inputs = dict(trainer.seen[-1])
    assert inputs[REUSED_KEY].dtype == torch.bool
    mask = inputs["completion_mask"].float()
    if name == "kl_cov":  # behaviour away from the current policy, so |log π − log π_b| moves
        noise = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))
        inputs[BEHAVIOUR_KEY] = inputs[BEHAVIOUR_KEY] + 0.05 * noise
        if "old_per_token_logps" in inputs:
            inputs["old_per_token_logps"] = inputs[BEHAVIOUR_KEY]
    behaviour = inputs.get(BEHAVIOUR_KEY, inputs.get("old_per_token_logps"))
    ours_control = TokenControl(**control)
    step = trainer.state.global_step
    theirs = gradient(trainer, trainer._compute_loss(trainer.model, dict(inputs)))

    current = logprobs(trainer, inputs)
    generator = torch.Generator().manual_seed(trainer.args.seed * 1_000_003 + step)
    value, _ = policy_loss(
        build_loss(ours_name),
        current,
        current.detach() if behaviour is None else behaviour,
        inputs[RAW_ADVANTAGES_KEY],
        mask,
        aggregation="token_mean",
        denominator=float(inputs["num_items_in_batch"]),
        control=ours_control,
        control_rows=inputs[REUSED_KEY],
        generator=generator,
    )
    ours = gradient(trainer, value)
    plain = dict(inputs)
    plain.pop(REUSED_KEY)
    plain["advantages"] = inputs[RAW_ADVANTAGES_KEY] - (-0.1 if loss == "asymre" else 0.0)
    without = gradient(trainer, GRPOTrainer._compute_loss(trainer, trainer.model, plain))
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-7)
    assert (theirs - without).abs().max() > 1e-6  # the control changed the gradient


def test_kl_cov_on_replayed_rows_with_sampling_weights_gives_our_learners_gradient(
    tmp_path: Path,
) -> None:
    """The preset's `rows: replayed` on a replayed micro-batch, each row weighted by a sampling
    weight (on the policy term through its advantage, on KL-Cov's term directly)."""
    trainer = trained_trainer(
        tmp_path,
        max_steps=4,
        replay_method="uniform",
        replay_knobs={"capacity": 64, "replay_ratio": 2},
        replay_token_control={"mode": "kl_cov", "fraction": 0.3},
    )
    inputs = dict(trainer.seen[-1])
    reused = inputs[REUSED_KEY]
    assert reused.any()  # rows trained before are in the batch
    mask = inputs["completion_mask"].float()
    noise = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2))
    inputs[BEHAVIOUR_KEY] = inputs["old_per_token_logps"] = inputs[BEHAVIOUR_KEY] + 0.05 * noise
    weights = torch.linspace(0.5, 1.5, len(reused))
    inputs[WEIGHTS_KEY] = weights
    inputs["advantages"] = inputs[RAW_ADVANTAGES_KEY] * weights
    theirs = gradient(trainer, trainer._compute_loss(trainer.model, dict(inputs)))
    current = logprobs(trainer, inputs)
    value, _ = policy_loss(
        build_loss("grpo"), current, inputs[BEHAVIOUR_KEY], inputs[RAW_ADVANTAGES_KEY], mask,
        weights=weights, aggregation="token_mean",
        denominator=float(inputs["num_items_in_batch"]),
        control=TokenControl(mode="kl_cov", fraction=0.3), control_rows=reused,
    )  # fmt: skip
    torch.testing.assert_close(theirs, gradient(trainer, value), rtol=1e-4, atol=1e-7)
    unweighted = dict(inputs)
    unweighted.pop(WEIGHTS_KEY)
    other = gradient(trainer, trainer._compute_loss(trainer.model, unweighted))
    assert (theirs - other).abs().max() > 1e-6  # the weights reach KL-Cov's term


# ---------------------------------------------------------------------- in training
def test_kl_cov_on_reused_rows_trains_and_logs_the_covariance(tmp_path: Path) -> None:
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=4, scale_rewards="none"),
        replay_method="positive",
        replay_knobs={"capacity": 64, "replay_ratio": 2},
        replay_loss="asymre",
        replay_token_control={"mode": "kl_cov", "fraction": 0.05},
    )
    trainer = build(config, Captured)
    trainer.train()
    reused = torch.cat([inputs[REUSED_KEY] for inputs in trainer.seen])
    assert reused.any() and not reused.all()  # fresh rows and replayed ones
    assert all("old_per_token_logps" not in inputs for inputs in trainer.seen)  # AsymRE: ratio 1
    assert all(BEHAVIOUR_KEY in inputs for inputs in trainer.seen)
    logged = [h for h in trainer.state.log_history if "loss/cov_treated" in h]
    assert logged and max(h["loss/cov_treated"] for h in logged) > 0
    assert any("loss/cov_replayed" in h for h in trainer.state.log_history)
    assert any("loss/cov_fresh" in h for h in logged)


def test_without_a_control_the_covariance_is_still_logged(tmp_path: Path) -> None:
    trainer = trained_trainer(tmp_path)
    assert "loss/cov_fresh" in trainer.replay_metrics()
    assert "loss/cov_treated" not in trainer.replay_metrics()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"replay_token_control": {"mode": "kl_cv"}}, r"replay_token_control\.mode = 'kl_cv'"),
        ({"replay_token_control": {"fracton": 0.1}}, r"replay_token_control\.fracton: unknown"),
        ({"replay_token_control": {"fraction": 2}}, r"replay_token_control\.fraction = 2"),
        (
            {"replay_token_control": {"coef": "1"}},
            r"replay_token_control\.coef = '1': expected a number",
        ),
        ({"replay_token_control": "{bad"}, r"replay_token_control: not valid JSON"),
        (
            {"replay_token_control": {"mode": "kl_cov"}, "loss_type": "sapo"},
            r"loss_type = 'sapo': replay_token_control runs with",
        ),
    ],
)
def test_bad_token_control_fields_are_named(tmp_path: Path, fields: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message):
        ReplayGRPOConfig(**settings(tmp_path, **fields))
