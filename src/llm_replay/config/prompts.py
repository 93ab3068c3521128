"""How many rollouts a prompt gets: `generation.skip` (GRESO, arXiv 2506.02177: none for a prompt
that taught nothing lately) and `generation.adaptive` (AR3PO, arXiv 2509.25808: more for a prompt
not yet solved this round, fewer for one that is)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_replay.checks import integer
from llm_replay.config.parse import ConfigError, setting


@dataclass
class PromptSkipConfig:
    """Skip a train prompt whose last `after` groups all had equal rewards (all right or all
    wrong: a zero advantage under group baselines), re-testing it with a probability that starts
    at `retest` and grows with every skip (`runtime.prompt_skip`)."""

    enabled: bool = setting(False, "skip prompts whose recent groups taught nothing (sync runtime)")
    after: int = setting(1, "skip after this many uninformative groups in a row")
    retest: float = setting(
        0.1, "the probability of re-testing a skipped prompt, growing with every skip"
    )

    def check(self) -> None:
        integer("after", self.after, minimum=1, error=ConfigError)
        if not (math.isfinite(self.retest) and 0 < self.retest <= 1):
            raise ConfigError(f"retest = {self.retest!r}: must be in (0, 1]")


@dataclass
class AdaptiveRolloutConfig:
    """AR3PO's adaptive rollout and response reuse (`runtime.adaptive_rollouts`): sample
    `stage_size` completions per prompt, then `stage_size` more for the prompts with no correct
    one yet, up to `group_size` in all; with `reuse`, a prompt still unsolved gets its latest
    earlier correct completion in place of one wrong one."""

    enabled: bool = setting(
        False, "sample in stages, stopping a prompt at its first correct completion"
    )
    stage_size: int = setting(2, "completions per prompt per stage; must divide group_size")
    reuse: bool = setting(
        True, "give a prompt unsolved after every stage its latest earlier correct completion"
    )

    def check(self) -> None:
        k = self.stage_size
        integer("stage_size", k, minimum=1, error=ConfigError)
