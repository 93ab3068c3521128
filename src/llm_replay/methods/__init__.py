"""Replay methods: one module per method, found through one registry.

Importing this package imports every module in it, so a method (or a method option) registers
itself by existing: `@register` on its class is all the wiring it needs. The config loader reads
method names and knobs from `METHODS`, `llm-replay methods` lists them, and every front end drives a
method (with its options) through a `ReplayPipeline`.
"""

from __future__ import annotations

import importlib
import pkgutil

from llm_replay.methods.base import (
    MethodConfig,
    MethodConfigError,
    MethodContext,
    MethodOption,
    OptionConfig,
    ReplayMethod,
    TableReplay,
)
from llm_replay.methods.pipeline import ReplayPipeline
from llm_replay.methods.registry import METHODS, OPTIONS, describe, method_class
from llm_replay.methods.signals import RoundStats, RunSignals

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "METHODS",
    "OPTIONS",
    "MethodConfig",
    "MethodConfigError",
    "MethodContext",
    "MethodOption",
    "OptionConfig",
    "ReplayMethod",
    "ReplayPipeline",
    "RoundStats",
    "RunSignals",
    "TableReplay",
    "describe",
    "method_class",
]
