"""`dapo`: GRPO's clip with clip-higher, ε = 0.2 / 0.28 (aggregate with token_mean)."""

from __future__ import annotations

from llm_replay.algorithms.losses.base import register_loss
from llm_replay.algorithms.losses.grpo import PPOClip


@register_loss
class DAPO(PPOClip):
    name = "dapo"
    description = "grpo with clip-higher, ε = 0.2/0.28"
    paper = "Yu et al. 2025 (DAPO)"
    default_clip = (0.2, 0.28)
