"""The run directory's layout, in one place (and torch-free, so the experiment tools read it).

RUN_DIR/config.yaml         the resolved config the run was started with
RUN_DIR/metrics.jsonl       one record per iteration and per evaluation (`metrics.logging`)
RUN_DIR/summary.json        written when the run ends
RUN_DIR/trl/                TRL's own output, for runs on the TRL backend
RUN_DIR/checkpoint/         the latest checkpoint, one format for every runtime:
    DONE, model.safetensors, optimizer.*, rng.safetensors   the learner (`checkpoint.py`)
    signals.json                                            a learner-side method's signals
    state.json                                              loop counters, meter, evals, ...
    replay/                                                 the sync loop's method (its own
                                                            layout: `methods.base`), or, in
                                                            an asynchronous run:
    replay/table/                                           the table the workers fill (or
                                                            the intake queue of rounds)
    replay/method/                                          the learner's method ("rounds")
"""

from __future__ import annotations

from llm_replay.methods.base import TABLE_DIR
from llm_replay.metrics.logging import METRICS_FILE

CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
TRL_DIR = "trl"
CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "state.json"
SIGNALS_FILE = "signals.json"
REPLAY_DIR = "replay"
METHOD_DIR = "method"

__all__ = [
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "METHOD_DIR",
    "METRICS_FILE",
    "REPLAY_DIR",
    "SIGNALS_FILE",
    "STATE_FILE",
    "SUMMARY_FILE",
    "TABLE_DIR",
    "TRL_DIR",
]
