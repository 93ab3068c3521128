"""Metrics: compute accounting, role clocks, run logs (no torch: reports read these on a base install)."""

from llm_replay.metrics.compute import ComputeMeter
from llm_replay.metrics.logging import MetricsLogger, read_log, truncate_log
from llm_replay.metrics.roles import RoleClock

__all__ = [
    "ComputeMeter",
    "MetricsLogger",
    "RoleClock",
    "read_log",
    "truncate_log",
]
