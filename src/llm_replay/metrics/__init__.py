"""Metrics: compute accounting, held-out evaluation, run logs."""

from llm_replay.metrics.compute import ComputeMeter
from llm_replay.metrics.evaluation import evaluate, pass_at_k
from llm_replay.metrics.logging import MetricsLogger, read_log, truncate_log
from llm_replay.metrics.roles import RoleClock

__all__ = [
    "ComputeMeter",
    "MetricsLogger",
    "RoleClock",
    "evaluate",
    "pass_at_k",
    "read_log",
    "truncate_log",
]
