"""The replay system: tables, samplers, eviction, rate limiting, checkpoints.

numpy only: it imports neither torch nor anything of llm_replay above it (methods and runtimes
build on it, never the reverse).
"""

from llm_replay.buffer.checkpoint import CheckpointError
from llm_replay.buffer.eviction import EvictionPolicy
from llm_replay.buffer.group_sampler import Groups
from llm_replay.buffer.pair_sampler import Pairs
from llm_replay.buffer.rate_limit import (
    MinSize,
    RateLimiter,
    RateLimiterTimeout,
    SampleToInsertRatio,
    TableClosed,
)
from llm_replay.buffer.removers import REMOVERS, PositiveRetention, Remover
from llm_replay.buffer.sample import Sample
from llm_replay.buffer.samplers import (
    SAMPLERS,
    Fifo,
    Prioritized,
    Recency,
    Sampler,
    Uniform,
    make_sampler,
)
from llm_replay.buffer.stats import TableStats, TaskStats
from llm_replay.buffer.table import ReplayTable
from llm_replay.buffer.task_capacity import TaskCapacity
from llm_replay.buffer.task_sampler import TaskBalanced

__all__ = [
    "REMOVERS",
    "SAMPLERS",
    "CheckpointError",
    "EvictionPolicy",
    "Fifo",
    "Groups",
    "MinSize",
    "Pairs",
    "PositiveRetention",
    "Prioritized",
    "RateLimiter",
    "RateLimiterTimeout",
    "Recency",
    "Remover",
    "ReplayTable",
    "Sample",
    "SampleToInsertRatio",
    "Sampler",
    "TableClosed",
    "TableStats",
    "TaskBalanced",
    "TaskCapacity",
    "TaskStats",
    "Uniform",
    "make_sampler",
]
