"""Token controls applied inside a trainer's own loss: Clip-Cov, KL-Cov and W-REINFORCE's weight.

`algorithms/token_control.py` treats the reused rows' tokens on top of our own losses (arXiv
2505.22617; arXiv 2506.01347). Under a trainer that computes the loss itself (TRL's
`GRPOTrainer`), each control reaches the loss through what the trainer already reads, and only
one term is added beside it:

- `positive_weight` scales the chosen rows' advantages where A > 0 (`weighted_advantages`); a
  per-token policy loss positively homogeneous in the advantage (PPO-clip, CISPO, REINFORCE) is
  then scaled the same way on those rows;
- `clip_cov` hands the loss per-token advantages [B, T] with the chosen tokens' set to 0, which
  stops their policy gradient exactly as a detached token does; the tokens are chosen on the
  current log-probs, so between the trainer's forward pass and its loss
  (`ControlledMicroBatch.treat`, called from the front end's hook on the forward);
- `kl_cov` adds β·|log π − log π_behav| on the chosen tokens after the trainer's loss
  (`ControlledMicroBatch.kl_term`), which the front end reduces as its trainer reduces a
  per-token loss (TRL: `integrations.trl.token_control.trl_aggregate`).

The chosen rows, raw advantages, behaviour log-probs and the rows' sampling weights travel in
the micro-batch under `replay_*` keys, which a trainer's loss does not read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from llm_replay.algorithms.token_control import TokenControl, TokenControlError

REUSED_KEY, RAW_ADVANTAGES_KEY, BEHAVIOUR_KEY, WEIGHTS_KEY = (
    "replay_reused",
    "replay_raw_advantages",
    "replay_behaviour_logps",
    "replay_sampling_weights",
)
NUMBERS = ("fraction", "coef", "low", "high", "positive_weight")


def control_from(value: dict[str, Any], setting: str = "replay_token_control") -> TokenControl:
    """A mapping of `TokenControl`'s fields as one; a wrong field is named under `setting`."""
    known = {f.name for f in fields(TokenControl)}
    for key, given in value.items():
        if key not in known:
            raise ValueError(f"{setting}.{key}: unknown; choose from {sorted(known)}")
        if key in NUMBERS and (isinstance(given, bool) or not isinstance(given, int | float)):
            raise ValueError(f"{setting}.{key} = {given!r}: expected a number")
    try:
        return TokenControl(**value)
    except TokenControlError as error:  # its message starts with the field's name
        raise ValueError(f"{setting}.{error}") from None


def weighted_advantages(
    control: TokenControl, advantages: Tensor, raw: Tensor, reused: Tensor
) -> Tensor:
    """The advantages the trainer trains on with `positive_weight` applied to the chosen rows whose own
    advantage (`raw`, before AsymRE's shift or sampling weights) is positive."""
    if control.positive_weight == 1.0:
        return advantages
    rows = control.chosen_rows(reused) & (raw > 0)
    return torch.where(rows, advantages * control.positive_weight, advantages)


@dataclass
class ControlledMicroBatch:
    """One micro-batch's control: which tokens are treated, chosen on the first log-probs the
    trainer computes with gradient for it, and the KL-Cov term on them."""

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
        """β·|log π − log π_behav| on the treated tokens [B, T], or None (not KL-Cov, or the trainer
        never computed the log-probs with gradient)."""
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
