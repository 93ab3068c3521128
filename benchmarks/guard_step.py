"""What the guard's reading costs a learner step: `Learner.step` on the same batch with
`replay_gradient` off and on, interleaved so that both see the same machine, on the built-in
chain_sum model with KL-Cov on the replayed rows (as `auto` trains). The batch is shaped like one
of `auto_steps2`'s first steps: 128 rows in groups of 8, a quarter fresh, the rest replayed.
Prints the median seconds per step of each and their ratio; `--json PATH` writes them."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

ROWS, GROUP, FRESH_SHARE = 128, 8, 0.25


def batch():  # type: ignore[no-untyped-def]
    from llm_replay.buffer import Sample
    from llm_replay.data.batch import RolloutBatch

    rng = np.random.default_rng(0)
    prompts = rng.integers(4, 8, ROWS)
    completions = rng.integers(3, 9, ROWS)
    rollouts = RolloutBatch.from_flat(
        prompt_ids=rng.integers(3, 20, prompts.sum()).astype(np.int32),
        prompt_lengths=prompts,
        completion_ids=rng.integers(3, 20, completions.sum()).astype(np.int32),
        completion_lengths=completions,
        behaviour_logprobs=-rng.random(completions.sum()).astype(np.float32),
        rewards=rng.integers(0, 2, ROWS).astype(np.float64),
        group_ids=np.arange(ROWS) // GROUP,
        policy_versions=np.zeros(ROWS, np.int64),
    )
    sample = Sample.from_batch(rollouts.with_advantages(rng.normal(size=ROWS)), current_version=0)
    replayed = np.arange(ROWS) >= int(FRESH_SHARE * ROWS)
    return dataclasses.replace(sample, ages=replayed.astype(np.int64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from llm_replay.algorithms.token_control import TokenControl
    from llm_replay.learner import Learner, LearnerSettings
    from llm_replay.models import load_policy

    torch.set_num_threads(1)
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = batch()
    control = TokenControl(mode="kl_cov", fraction=0.05, coef=1.0)
    learners = {}
    for name, reading in (("off", False), ("on", True)):
        m = copy.deepcopy(model)
        settings = LearnerSettings(micro_batch_size=ROWS, control=control, replay_gradient=reading)
        learners[name] = Learner(m, torch.optim.SGD(m.parameters(), lr=0.0), settings)
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    for step in range(args.steps + 2):
        for name in ("off", "on") if step % 2 else ("on", "off"):
            start = time.perf_counter()
            learners[name].step(sample)
            if step >= 2:  # the first two of each are warm-up
                seconds[name].append(time.perf_counter() - start)
    out = {f"step_{k}_s": statistics.median(v) for k, v in seconds.items()}
    out["ratio_on_off"] = out["step_on_s"] / out["step_off_s"]
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
