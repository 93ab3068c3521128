"""The generator seam: G sampled completions per prompt, with behaviour log-probs.

A `Generator` returns, for every sampled token, the log-probability it had under the exact
distribution that sampled it (the same logits, the same temperature, the same top-k/top-p
truncation), so the learner's ratio π_θ/π_behav is exactly 1 for a rollout trained on the weights
that made it. It also reports why each completion ended and which policy version made it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; top_k 0 and top_p 1 switch truncation off."""

    max_new_tokens: int = 16
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens = {self.max_new_tokens!r}: must be >= 1")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature = {self.temperature!r}: must be finite and >= 0")
        if self.top_k < 0:
            raise ValueError(f"top_k = {self.top_k!r}: must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p = {self.top_p!r}: must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Generation:
    """N = len(prompts) * n completions, prompt-major (the n of prompt 0 first).

    completion_ids / behaviour_logprobs / entropies: flat, `completion_lengths` per row.
    entropies: entropy of the sampling distribution at each generated position (nats).
    steps: the model's batched forward passes this call ran (the prefill and one a decoded
    position after it): the sequential work, which a small batch pays as much of as a large one
    (0 where a backend does not say).
    """

    prompt_index: npt.NDArray[np.int64]
    completion_ids: npt.NDArray[np.int32]
    completion_lengths: npt.NDArray[np.int32]
    behaviour_logprobs: npt.NDArray[np.float32]
    entropies: npt.NDArray[np.float32]
    finish_reasons: tuple[str, ...]
    policy_version: int
    prompt_tokens: int
    padded_tokens: int
    steps: int = 0

    def __len__(self) -> int:
        return len(self.completion_lengths)

    def completions(self) -> list[npt.NDArray[np.int32]]:
        return np.split(self.completion_ids, np.cumsum(self.completion_lengths)[:-1])


class Generator(Protocol):
    """What the training loop needs from an inference backend."""

    policy_version: int

    def generate(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams
    ) -> Generation: ...

    def load_weights(self, state: dict[str, Any], version: int) -> None: ...
