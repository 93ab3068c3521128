"""Generation workers and the learner at once, from Python: the threaded runtime, top to bottom.

    python examples/train_async.py           # ~1 minute on 2 CPU cores
    python examples/train_async.py ray       # the same run with Ray actors (llm-replay[ray])
    python examples/train_async.py --iterations 4   # a shorter run (the test suite's)

The run is `async_uniform` with a shorter budget. It prints the learning result and
how the time was used: how long generators waited on the rate limiter, how long the learner
waited for data, the table's share of the learner's time, and the replay ratio the limiter held.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from llm_replay.config import load_config
from llm_replay.metrics import read_log
from llm_replay.runtime import build_trainer

logging.basicConfig(level=logging.INFO, format="%(message)s")
parser = argparse.ArgumentParser(description="uniform replay with workers and a learner at once")
parser.add_argument("runtime", nargs="?", default="threaded", choices=["threaded", "ray"])
parser.add_argument("--iterations", type=int, default=20, help="generation rounds (default 20)")
args = parser.parse_args()
runtime = args.runtime
if runtime == "ray":
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, single-user Ray
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(Path("tmp/ray").resolve()))

config = load_config(
    "async_uniform",
    [
        f"runtime={runtime}",
        f"train.iterations={args.iterations}",
        f"eval.every={max(1, args.iterations // 2)}",
        "eval.size=200",
        f"log.run_dir=runs/example_{runtime}",
        "log.tensorboard=false",
    ],
)
summary = build_trainer(config).run()

last = [r for r in read_log(config.run_dir) if r["kind"] == "train"][-1]
print(f"accuracy {summary['base_accuracy']:.1%} -> {summary['final_accuracy']:.1%}")
print(f"{summary['steps']} gradient steps, mu = {summary['mu']:.2f}")
print(f"generators idle {last['async/generator_idle_fraction']:.1%} (held back by the limiter)")
print(f"learner idle {last['async/learner_idle_fraction']:.1%} (waiting for rollouts)")
print(f"table share of learner time {last['async/table_share_of_learner']:.3%}")
print(
    f"samples per insert {last['buffer/samples_per_insert']:.2f} "
    f"(limiter: {config.replay.samples_per_insert:g}), mean sampled age {last['train/age_mean']:.1f} steps"
)
if runtime == "ray":
    ray.shutdown()
