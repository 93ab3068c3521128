"""FreshPER: advantage-prioritized replay whose priorities decay with the rollout's age.

After arXiv 2604.16918 (Ma et al., "Freshness-Aware Prioritized Experience Replay for LLM/VLM
Reinforcement Learning"): plain PER fails on LLMs because a rollout's priority, computed when it
was generated, goes stale as the policy moves, and old high-priority rollouts keep dominating the
draws. FreshPER multiplies every priority by exp(−age/τ), age in learner steps since the rollout
was generated (half-life τ·ln 2), motivated by the exponential decay of the effective sample size
as the policy drifts from the behaviour policy. Here the decayed mass is (|A| + ε)^α · exp(−age/τ)
in the table's sum tree (`Prioritized(decay_steps=τ)`), and batches are composed as in
`prioritized`: every fresh rollout plus round(fresh_ratio · R) replayed ones. The decay replaces
the hard age cut-off, so `max_age` defaults to none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_replay.methods.base import MethodContext, knob, positive
from llm_replay.methods.prioritized import PrioritizedConfig, PrioritizedReplay
from llm_replay.methods.registry import register
from llm_replay.methods.table_spec import TableSpec


@dataclass
class FreshPERConfig(PrioritizedConfig):
    max_age: int | None = knob(None, "evict rollouts older than this many learner steps")
    decay_steps: float = knob(5.0, "τ: priorities decay as exp(−age/τ), age in learner steps")

    def check(self) -> None:
        super().check()
        positive("decay_steps", self.decay_steps)


@register
class FreshPER(PrioritizedReplay[FreshPERConfig]):
    name = "freshper"
    description = "|A|-prioritized rollouts whose priorities decay as exp(−age/τ); fresh-anchored."
    paper = "Freshness-aware prioritized experience replay, arXiv 2604.16918"
    Config = FreshPERConfig

    @classmethod
    def table_spec(cls, settings: Any, context: MethodContext) -> TableSpec:
        s: FreshPERConfig = settings  # its Config (the base's signature takes PrioritizedConfig)
        arguments = {
            "alpha": s.alpha,
            "beta": s.beta,
            "max_age": s.max_age,
            "decay_steps": s.decay_steps,
            "seed": context.seed,
        }
        return TableSpec("prioritized", s.capacity, arguments)
