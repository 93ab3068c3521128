"""A tour of the replay table, readable top to bottom (what `make demo` runs until training lands).

It plays a generator and a learner by hand: each "step" generates 32 prompts x 8 rollouts of
LLM-like shape, stores them, and draws learner-ready batches from four tables side by side:
the on-policy queue, uniform replay from a FIFO buffer, positive-biased replay and |A|-prioritized
replay with age eviction and fresh-anchored batches. Then it checkpoints a table, restores it and
shows that the restored table draws exactly the same batch.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.buffer import ReplayTable
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.prioritized import FreshAnchored

PROMPTS, GROUP, STEPS, BATCH = 32, 8, 40, 256


def generate(rng: np.random.Generator, step: int) -> RolloutBatch:
    """Stand-in for a generator: 32 prompts x 8 completions with behaviour log-probs."""
    n = PROMPTS * GROUP
    groups = step * PROMPTS + np.arange(n) // GROUP
    prompts = {g: rng.integers(0, 32_000, rng.integers(20, 80)) for g in np.unique(groups)}
    lengths = rng.integers(16, 512, n)
    correct = rng.random(n) < 0.3 + 0.01 * step
    batch = RolloutBatch.from_ragged(
        prompt_ids=[prompts[g] for g in groups],
        completion_ids=[rng.integers(0, 32_000, k) for k in lengths],
        behaviour_logprobs=[-rng.exponential(0.8, k).astype(np.float32) for k in lengths],
        rewards=correct.astype(float),
        group_ids=groups,
        policy_versions=np.full(n, step),
        correct=correct,
        tasks="demo",
    )
    return batch.with_advantages(group_advantages(batch.rewards, batch.group_ids, "grpo"))


def main() -> None:
    console = Console()
    rng = np.random.default_rng(0)
    tables = {
        "on-policy queue": ReplayTable.queue(4 * BATCH, name="queue"),
        "uniform FIFO": ReplayTable.uniform(8 * BATCH, name="uniform"),
        "positive-biased": ReplayTable.positive_biased(8 * BATCH, delta=0.5, name="positive"),
        "prioritized": ReplayTable.prioritized(8 * BATCH, max_age=10, name="prioritized"),
    }
    fresh_anchored = FreshAnchored(tables["prioritized"], ratio=0.5)
    draw_seconds = dict.fromkeys(tables, 0.0)
    for step in track(range(STEPS), description="generate -> store -> sample", console=console):
        fresh = generate(rng, step)
        for name, table in tables.items():
            table.set_policy_version(step)
            start = time.perf_counter()
            if name == "prioritized":
                fresh_anchored.compose(fresh)
            else:
                table.insert(fresh)
                table.sample(BATCH)
            draw_seconds[name] += time.perf_counter() - start

    report = Table(title=f"{STEPS} steps x {PROMPTS * GROUP} rollouts; batches of {BATCH}")
    for column in ("table", "size", "MiB", "x raw", "draw/ins", "age", "evicted", "ms/step"):
        report.add_column(column, justify="left" if column == "table" else "right")
    for name, table in tables.items():
        s = table.stats()
        reason = max(s.evictions, key=lambda r: s.evictions[r])
        ratio = f"{s.nbytes / s.payload_nbytes:.2f}" if s.payload_nbytes else "-"
        report.add_row(
            name,
            str(s.size),
            f"{s.nbytes / 2**20:.1f}",
            ratio,
            f"{s.samples_per_insert:.2f}",
            f"{s.sampled_age_mean:.1f}",
            f"{sum(s.evictions.values())} {reason}",
            f"{1e3 * draw_seconds[name] / STEPS:.1f}",
        )
    console.print(report)
    console.print(
        "x raw: table bytes / raw payload (token ids + log-probs); draw/ins: rollouts drawn per "
        "rollout inserted; age: mean policy versions behind, over drawn rollouts"
    )

    table = tables["uniform FIFO"]
    with tempfile.TemporaryDirectory() as tmp:
        path = table.save(Path(tmp) / "uniform")
        restored = ReplayTable.load(path)
        same = np.array_equal(table.sample(64).keys, restored.sample(64).keys)
        console.print(f"checkpoint at {path.name}/ restored: next batch identical = {same}")
    batch = tables["positive-biased"].sample(4)
    console.print(
        f"a learner-ready batch: input_ids {batch.input_ids.shape}, behaviour_logprobs "
        f"{batch.behaviour_logprobs.shape}, ages {batch.ages.tolist()}, "
        f"times sampled {batch.times_sampled.tolist()}"
    )


if __name__ == "__main__":
    main()
