"""`generation.skip:` — not generating prompts that will teach nothing (GRESO, arXiv 2506.02177)."""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        if isinstance(self.after, bool) or not isinstance(self.after, int) or self.after < 1:
            raise ConfigError(f"after = {self.after!r}: must be an integer >= 1")
        if not (math.isfinite(self.retest) and 0 < self.retest <= 1):
            raise ConfigError(f"retest = {self.retest!r}: must be in (0, 1]")
