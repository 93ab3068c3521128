"""Train the shipped tiny model with uniform replay from Python, top to bottom.

    python examples/train_tiny.py            # ~1 minute on 2 CPU cores

The same run as `llm-replay train configs/replay_uniform.yaml --set train.iterations=40`: load a
preset, override a few fields, run the synchronous loop, read the summary and the JSONL log.
"""

from __future__ import annotations

import logging

from llm_replay.config import load_config
from llm_replay.metrics import read_log
from llm_replay.runtime import SyncTrainer

logging.basicConfig(level=logging.INFO, format="%(message)s")

config = load_config(
    "configs/replay_uniform.yaml",
    ["train.iterations=40", "eval.every=20", "log.run_dir=runs/example", "log.tensorboard=false"],
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
