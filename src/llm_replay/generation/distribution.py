"""The sampling distribution, defined once for the generator and the learner.

The generator records the log-prob of each sampled token under the distribution that drew it:
logits / T, then top-k and top-p truncation. The learner's ratio π_θ/π_behav is exactly 1 on fresh
data only if it evaluates the same truncated distribution, so both call `sampling_logprobs`.
Truncated tokens get log-prob -inf here; the learner floors what it gathers (a stale token outside
today's nucleus then has ratio 0, the probability today's sampler would give it).
"""

from __future__ import annotations

import torch
from torch import Tensor


def truncate(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """Mask logits outside top-k and then outside the top-p nucleus with -inf. [..., V]."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def sampling_logprobs(
    logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> Tensor:
    """log-probs over the vocabulary of the distribution tokens are sampled from. [..., V]."""
    scaled = logits.float() / (temperature or 1.0)
    return torch.log_softmax(truncate(scaled, top_k, top_p), dim=-1)


def entropy(logp: Tensor) -> Tensor:
    """Entropy in nats of each distribution in `logp` [..., V] (truncated tokens contribute 0)."""
    probs = logp.exp()
    return -(probs * torch.where(probs > 0, logp, 0.0)).sum(-1)
