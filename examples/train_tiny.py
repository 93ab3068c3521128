"""Train the shipped tiny model with uniform replay from Python, top to bottom.

    python examples/train_tiny.py                   # ~1 minute on 2 CPU cores
    python examples/train_tiny.py --iterations 6    # a shorter run (the test suite's)

The same run as `llm-replay train uniform --set train.iterations=40`: load a
preset, override a few fields, run the synchronous loop, read the summary and the JSONL log.
"""

from __future__ import annotations

import argparse
import logging

from llm_replay.config import load_config
from llm_replay.metrics import read_log
from llm_replay.runtime import SyncTrainer

logging.basicConfig(level=logging.INFO, format="%(message)s")
parser = argparse.ArgumentParser(description="uniform replay on the shipped tiny model")
parser.add_argument("--iterations", type=int, default=40, help="generation rounds (default 40)")
iterations = parser.parse_args().iterations

config = load_config(
    "uniform",
    [
        f"train.iterations={iterations}",
        f"eval.every={max(1, iterations // 2)}",
        "log.run_dir=runs/example",
        "log.tensorboard=false",
    ],
)
trainer = SyncTrainer(config)
summary = trainer.run()

print(f"accuracy {summary['base_accuracy']:.1%} -> {summary['final_accuracy']:.1%}")
print(f"compute {summary['compute_seconds']['total']:.1f} s, mu = {summary['mu']:.2f}")
for record in read_log(config.run_dir):
    if record["kind"] == "eval":
        print(
            f"  iteration {record['iteration']:3d}: {record['eval/accuracy']:.1%} "
            f"after {record['compute/seconds']:.1f} s of compute"
        )
