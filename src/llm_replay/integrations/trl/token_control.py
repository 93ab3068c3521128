"""Token controls inside TRL's loss: Clip-Cov, KL-Cov and W-REINFORCE's weight on replayed successes.

`algorithms/token_control.py` treats the reused rows' tokens on top of our own losses (arXiv
2505.22617; arXiv 2506.01347). Under `ReplayGRPOTrainer` TRL computes the loss, so each control
reaches it through what TRL already reads, and only one term is added beside it:

- `positive_weight` scales the chosen rows' advantages where A > 0 (`weighted_advantages`). TRL's
  per-token loss is positively homogeneous in the advantage for every loss type allowed here, so
  this is the same as scaling those rows' per-token losses.
- `clip_cov` gives TRL per-token advantages [B, T] with the chosen tokens' set to 0, which stops
  their policy gradient exactly as a detached token does. The tokens are chosen on the current
  log-probs, so this happens between TRL's forward pass and its loss (`ControlledMicroBatch.treat`,
  called from the trainer's `_get_per_token_logps_and_entropies`, which TRL calls before it reads
  the advantages).
- `kl_cov` adds β·|log π − log π_behav| on the chosen tokens after TRL's loss, normalised the way
  TRL normalises its per-token loss for the configured `loss_type` (`trl_aggregate`; tested
  against TRL's own loss for every loss type allowed here).

The chosen rows, raw advantages, behaviour log-probs and (with `replay_sampling_weights`) the
rows' sampling weights travel in the micro-batch under `replay_*` keys, which TRL's loss does not
read; with AsymRE the behaviour log-probs stay out of
`old_per_token_logps`, so TRL's ratio is still 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from llm_replay.algorithms.token_control import TokenControl, TokenControlError

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")
REUSED_KEY, RAW_ADVANTAGES_KEY, BEHAVIOUR_KEY, WEIGHTS_KEY = (
    "replay_reused",
    "replay_raw_advantages",
    "replay_behaviour_logps",
    "replay_sampling_weights",
)
NUMBERS = ("fraction", "coef", "low", "high", "positive_weight")


def control_from(value: dict[str, Any]) -> TokenControl:
    """`replay_token_control` as a `TokenControl`; a wrong field is named in the error."""
    known = {f.name for f in fields(TokenControl)}
    for key, given in value.items():
        if key not in known:
            raise ValueError(f"replay_token_control.{key}: unknown; choose from {sorted(known)}")
        if key in NUMBERS and (isinstance(given, bool) or not isinstance(given, int | float)):
            raise ValueError(f"replay_token_control.{key} = {given!r}: expected a number")
    try:
        return TokenControl(**value)
    except TokenControlError as error:  # its message starts with the field's name
        raise ValueError(f"replay_token_control.{error}") from None


def weighted_advantages(
    control: TokenControl, advantages: Tensor, raw: Tensor, reused: Tensor
) -> Tensor:
    """The advantages TRL trains on with `positive_weight` applied to the chosen rows whose own
    advantage (`raw`, before AsymRE's shift or sampling weights) is positive."""
    if control.positive_weight == 1.0:
        return advantages
    rows = control.chosen_rows(reused) & (raw > 0)
    return torch.where(rows, advantages * control.positive_weight, advantages)


def trl_aggregate(
    per_token: Tensor,
    mask: Tensor,
    *,
    loss_type: str,
    accumulation: int,
    max_completion_length: int,
    items: Tensor | None,
    processes: int,
    steps_per_generation: int,
) -> Tensor:
    """A per-token term [B, T] reduced as TRL reduces its per-token loss in training, for the
    loss types in `LOSS_TYPES` (`items` is the micro-batch's `num_items_in_batch`)."""
    masked = per_token * mask
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0) / accumulation
    if loss_type == "dr_grpo":
        return masked.sum() / (per_token.size(0) * max_completion_length) / accumulation
    if loss_type in ("dapo", "cispo"):
        if items is None:
            raise ValueError(
                f"loss_type = {loss_type!r}: the micro-batch has no num_items_in_batch"
            )
        normalizer = items.clamp(min=1.0) / processes * accumulation / steps_per_generation
        return masked.sum() / normalizer
    raise ValueError(f"loss_type = {loss_type!r}: token controls run with {list(LOSS_TYPES)}")


@dataclass
class ControlledMicroBatch:
    """One micro-batch's control: which tokens are treated, chosen on the first log-probs TRL
    computes with gradient for it, and the KL-Cov term on them."""

    control: TokenControl
    inputs: dict[str, Any]
    generator: torch.Generator | None = None
    treated: Tensor | None = None
    logprobs: Tensor | None = field(default=None, repr=False)
    mask: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.mask = self.inputs["completion_mask"].to(torch.float32)

    def treat(self, logprobs: Tensor) -> None:
        """Choose the tokens on the current log-probs; Clip-Cov zeroes their advantages."""
        reused = self.inputs[REUSED_KEY]
        raw = self.inputs[RAW_ADVANTAGES_KEY]
        self.logprobs = logprobs
        self.treated = self.control.select(logprobs, raw, self.mask, reused, self.generator)
        if self.control.stops_gradient:
            advantages = self.inputs["advantages"]
            per_token = (
                advantages[:, None].expand_as(logprobs) if advantages.dim() == 1 else advantages
            )
            self.inputs["advantages"] = per_token.masked_fill(self.treated, 0.0)

    def kl_term(self) -> Tensor | None:
        """β·|log π − log π_behav| on the treated tokens [B, T], or None (not KL-Cov, or TRL never
        computed the log-probs with gradient)."""
        if not self.control.reads_behaviour or self.logprobs is None or self.treated is None:
            return None
        behaviour: Tensor = self.inputs[BEHAVIOUR_KEY]
        gap = (self.logprobs - behaviour).abs()
        term = self.control.coef * torch.where(self.treated, gap, torch.zeros_like(gap))
        weights = self.inputs.get(WEIGHTS_KEY)  # sampling weights: the row's loss is weighted
        return term if weights is None else term * weights[:, None]

    def treated_share(self) -> float:
        if self.treated is None:
            return 0.0
        return float(self.treated.sum() / self.mask.sum().clamp(min=1))
