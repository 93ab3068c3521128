"""Token controls inside TRL's loss (`frontend.token_control`), reduced the way TRL reduces it.

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

from torch import Tensor

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")


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
