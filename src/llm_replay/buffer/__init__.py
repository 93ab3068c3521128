"""The replay system: tables, samplers, eviction, rate limiting, mixtures, checkpoints.

numpy only; this package never imports torch.
"""

from llm_replay.buffer.checkpoint import CheckpointError
from llm_replay.buffer.eviction import EvictionPolicy
from llm_replay.buffer.mixture import FreshAnchored, Mixture, RLEPBlend
from llm_replay.buffer.pool import SuccessPool
from llm_replay.buffer.rate_limit import (
    MinSize,
    RateLimiter,
    RateLimiterTimeout,
    SampleToInsertRatio,
    TableClosed,
)
from llm_replay.buffer.sample import Sample
from llm_replay.buffer.samplers import (
    SAMPLERS,
    Fifo,
    Groups,
    PositiveBiased,
    Prioritized,
    Recency,
    Sampler,
    Uniform,
    make_sampler,
)
from llm_replay.buffer.stats import TableStats
from llm_replay.buffer.table import ReplayTable

__all__ = [
    "SAMPLERS",
    "CheckpointError",
    "EvictionPolicy",
    "Fifo",
    "FreshAnchored",
    "Groups",
    "MinSize",
    "Mixture",
    "PositiveBiased",
    "Prioritized",
    "RLEPBlend",
    "RateLimiter",
    "RateLimiterTimeout",
    "Recency",
    "ReplayTable",
    "Sample",
    "SampleToInsertRatio",
    "Sampler",
    "SuccessPool",
    "TableClosed",
    "TableStats",
    "Uniform",
    "make_sampler",
]
