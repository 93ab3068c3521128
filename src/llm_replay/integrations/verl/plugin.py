"""What verl loads from llm-replay in every process: the advantage estimator and the losses.

verl imports every `verl.plugins` entry point when it is imported (`verl/__init__.py`), so its
Ray workers, which build the actor's loss, find these registered without any import of ours in
the user's script. Registered here:

- `algorithm.adv_estimator=llm_replay`: each row's advantage as the sampler booked it
  (`advantages.py`);
- `actor_rollout_ref.actor.policy_loss.loss_mode=llm_replay_<name>` for each llm-replay loss that
  needs only what verl hands a policy loss (the current and old log-probs, advantages, mask and
  rollout correction weights): `llm_replay_asymre`, `llm_replay_tis`, `llm_replay_icepop`,
  `llm_replay_m2po`, ... with the loss's default knobs (`llm-replay losses` lists them). verl's
  `old_log_prob` is the behaviour policy when `algorithm.rollout_correction.bypass_mode=true`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from verl.trainer.ppo.core_algos import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    agg_loss,
    register_adv_est,
    register_policy_loss,
)

from llm_replay.algorithms.losses import LOSSES, LossInputs, build_loss, loss_statistics
from llm_replay.integrations.verl.advantages import ESTIMATOR, book_advantages

LOSS_PREFIX = "llm_replay_"
METRIC_PREFIX = (
    f"actor/{LOSS_PREFIX}"  # a loss part or behaviour statistic, as verl's actor logs it
)
NOT_IN_VERL = {"exgrpo": "needs to know which rows were replayed, which verl's loss is not told"}


def estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's advantage estimator `llm_replay` (see `advantages.py`)."""
    if index is None:
        raise ValueError(f"algorithm.adv_estimator={ESTIMATOR}: verl passed no uid per row")
    return book_advantages(token_level_rewards, response_mask, list(index))


def verl_loss(name: str) -> Callable[..., tuple[torch.Tensor, dict[str, Any]]]:
    """llm-replay's loss `name` with verl's policy-loss signature."""
    loss = build_loss(name)

    def policy_loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        mask = response_mask.to(log_prob.dtype)
        row_advantages = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        inputs = LossInputs(log_prob, old_log_prob, row_advantages, mask)
        per_token, parts = loss(inputs)
        if rollout_is_weights is not None:
            per_token = per_token * rollout_is_weights
        batch_info = getattr(config, "global_batch_info", None) or {}
        value = agg_loss(
            loss_mat=per_token, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info
        )
        statistics = loss_statistics(inputs, parts)
        return value, {f"{METRIC_PREFIX}{key}": v for key, v in statistics.items()}

    policy_loss.__name__ = f"{LOSS_PREFIX}{name}"
    return policy_loss


def register() -> list[str]:
    """Register the estimator and every loss verl can run; returns the loss modes registered."""
    if ESTIMATOR not in ADV_ESTIMATOR_REGISTRY:
        register_adv_est(ESTIMATOR)(estimator)
    names = []
    for name, cls in sorted(LOSSES.items()):
        if cls.needs_proximal or name in NOT_IN_VERL:
            continue
        mode = f"{LOSS_PREFIX}{name}"
        if mode not in POLICY_LOSS_REGISTRY:
            register_policy_loss(mode)(verl_loss(name))
        names.append(mode)
    return names


REGISTERED = register()
