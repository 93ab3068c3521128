"""`llm-replay inspect DIR`: what a saved or durable replay table holds.

Size, tokens and bytes against the table's limits, the policy version and the age histogram,
reward and advantage distributions, reuse counts, evictions by reason, each task's rows, share,
age and correct share on a mixture, and a few rows (with their task) decoded with the run's
tokenizer when one is given. `--plots OUT` draws the histograms as PNGs. The
table is read without changing its directory (`ReplayTable.read`). A sharded Ray table's
checkpoint (`replay/table/shard-K`) is reported shard by shard, then in total.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.markup import escape
from rich.table import Table

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.checkpoint import MANIFEST
from llm_replay.buffer.durable import is_durable_dir
from llm_replay.buffer.stats import HISTOGRAM_BINS
from llm_replay.data.rollout import ANNOTATORS
from llm_replay.terminal import console


def sharded_table_dirs(path: Path) -> list[Path]:
    """The shard directories (`shard-K`) of a sharded table's checkpoint, in shard order, or []
    when `path` is a table itself."""
    if (path / MANIFEST).exists() or is_durable_dir(path):
        return []
    shards = [p for p in path.glob("shard-*") if p.is_dir() and p.name[6:].isdigit()]
    return sorted(shards, key=lambda p: int(p.name[6:]))


def quantiles(values: np.ndarray) -> dict[str, float] | None:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    q = np.quantile(finite, [0.0, 0.1, 0.5, 0.9, 1.0])
    return {
        "mean": float(finite.mean()),
        "min": float(q[0]),
        "p10": float(q[1]),
        "median": float(q[2]),
        "p90": float(q[3]),
        "max": float(q[4]),
        "count": int(finite.size),
    }


def describe_table(table: ReplayTable, *, rows: int = 3, tokenizer: Any = None) -> dict[str, Any]:
    """A JSON-ready description of the table (the caller owns `table`; nothing is sampled)."""
    stats = table.stats()
    st = table.storage
    live = st.live_in_order()
    rewards = st.reward[live].astype(np.float64)
    advantages = st.advantage[live].astype(np.float64)
    correct = st.correct[live]
    versions, counts = np.unique(st.reward_version[live], return_counts=True)
    out: dict[str, Any] = {
        **stats.to_dict(),
        "sampler": {"name": table.sampler.name, **table.sampler.config()},
        "remover": None
        if table.remover is None
        else {"name": table.remover.name, **table.remover.config()},
        "rewards": quantiles(rewards),
        "advantages": quantiles(advantages),
        "advantage_missing": int(np.isnan(advantages).sum()),
        "correct_share": float((correct == 1).mean()) if (correct >= 0).any() else None,
        "policy_versions": quantiles(st.policy_version[live].astype(np.float64)),
        "reward_versions": {str(v): int(n) for v, n in zip(versions, counts, strict=True)},
        "preference_pairs": preference_summary(st, live),
        "rows": [],
    }
    if len(live) and rows > 0:
        picks = live[np.linspace(0, len(live) - 1, min(rows, len(live))).astype(int)]
        sample, _ = table.get(st.keys_of(picks))
        for i in range(len(sample)):
            p, c = int(sample.prompt_lengths[i]), int(sample.completion_lengths[i])
            ids = sample.input_ids[i][sample.attention_mask[i] > 0]
            prompt, completion = ids[:p].tolist(), ids[p : p + c].tolist()
            row: dict[str, Any] = {
                "key": int(sample.keys[i]),
                "policy_version": int(sample.policy_versions[i]),
                "reward_version": int(sample.reward_versions[i]),
                "reward": float(sample.rewards[i]),
                "advantage": float(sample.advantages[i]),
                "times_sampled": int(sample.times_sampled[i]),
                "annotator": ANNOTATORS[int(sample.annotators[i])],
                "task": sample.task_names[int(sample.task_codes[i])],
                "prompt_ids": prompt,
                "completion_ids": completion,
            }
            if tokenizer is not None:
                row["prompt"] = tokenizer.decode(prompt, skip_special_tokens=True)
                row["completion"] = tokenizer.decode(completion, skip_special_tokens=True)
            out["rows"].append(row)
    return out


def preference_summary(storage: Any, live: np.ndarray) -> dict[str, Any] | None:
    """Rows in preference pairs: pairs by annotator, annotation cost, reference log-probs taken
    (None when the table holds no pairs)."""
    codes = storage.annotator[live]
    paired = codes > 0
    if not paired.any():
        return None
    names, counts = np.unique(codes[paired], return_counts=True)
    reference = storage.reference_logprob[live][paired]
    return {
        "pairs": int(paired.sum()) // 2,
        "by_annotator": {
            ANNOTATORS[int(c)]: int(n) // 2 for c, n in zip(names, counts, strict=True)
        },
        "annotation_cost": float(storage.annotation_cost[live][paired].sum()),
        "reference_logprobs_missing": int(np.isnan(reference).sum()),
    }


def plot_table(table: ReplayTable, out: Path) -> list[Path]:
    """Histograms of age, reuse, reward and advantage as PNGs in `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    stats = table.stats()
    st = table.storage
    live = st.live_in_order()
    panels = (
        ("age", stats.age_histogram, "age (policy versions; last bin: ≥ 31)"),
        ("reuse", stats.reuse_histogram, "times sampled (last bin: ≥ 31)"),
    )
    paths = []
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8), dpi=110)
    for ax, (_, counts, label) in zip(axes[:2], panels, strict=True):
        ax.bar(np.arange(HISTOGRAM_BINS), counts, width=0.9)
        ax.set_xlabel(label)
        ax.set_ylabel("rollouts")
    for ax, (values, label) in zip(
        axes[2:],
        ((st.reward[live], "reward"), (st.advantage[live], "advantage (computed at generation)")),
        strict=True,
    ):
        finite = np.asarray(values, dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        if finite.size:
            ax.hist(finite, bins=30)
        else:
            ax.text(0.5, 0.5, "none", transform=ax.transAxes, ha="center")
        ax.set_xlabel(label)
    fig.suptitle(f"table {table.name!r}: {stats.size} rollouts, {stats.num_tokens} tokens")
    fig.tight_layout()
    path = out / "table_histograms.png"
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)
    return paths


def print_table_report(path: Path, r: dict[str, Any]) -> None:
    """`describe_table`'s report on the terminal: one table of figures, then the decoded rows."""

    def dist(d: dict[str, float] | None) -> str:
        if d is None:
            return "—"
        return (
            f"mean {d['mean']:.3g}, median {d['median']:.3g}, p10–p90 {d['p10']:.3g}–{d['p90']:.3g}"
            f", range {d['min']:.3g}–{d['max']:.3g}"
        )

    table = Table(title=f"{path}: table {r['name']!r} ({r['sampler']['name']} sampler)")
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("rollouts", f"{r['size']} of {r['max_rollouts']}")
    table.add_row("tokens", f"{r['num_tokens']} (limit {r['max_tokens'] or 'none'})")
    table.add_row(
        "bytes",
        f"{r['nbytes']} held, {r['payload_nbytes']} payload ({r['stored_nbytes']} stored: "
        "shared prompts once)",
    )
    table.add_row("policy version", str(r["policy_version"]))
    table.add_row("age histogram (0, 1, …)", " ".join(map(str, trim_histogram(r["age_histogram"]))))
    table.add_row(
        "reuse histogram (0, 1, …)", " ".join(map(str, trim_histogram(r["reuse_histogram"])))
    )
    table.add_row("rewards", dist(r["rewards"]))
    versions = r["reward_versions"]
    if set(versions) - {"0"}:
        table.add_row("reward model versions", ", ".join(f"v{v}: {n}" for v, n in versions.items()))
    table.add_row("advantages", dist(r["advantages"]))
    pairs = r.get("preference_pairs")
    if pairs:
        who = ", ".join(f"{name} {n}" for name, n in pairs["by_annotator"].items())
        table.add_row(
            "preference pairs",
            f"{pairs['pairs']} ({who}); annotation cost {pairs['annotation_cost']:g}",
        )
    share = r["correct_share"]
    table.add_row("correct", "unknown" if share is None else f"{100 * share:.1f}%")
    for name, t in (r.get("tasks") or {}).items():  # a mixture's members
        table.add_row(
            f"task {name}",
            f"{t['size']} rollouts ({100 * t['share']:.0f}%), mean age {t['age_mean']:.2f}, "
            f"{100 * t['correct_share']:.0f}% correct",
        )
    table.add_row("inserted / sampled", f"{r['inserts']} / {r['samples']} rollouts")
    table.add_row("evictions", ", ".join(f"{k} {v}" for k, v in r["evictions"].items() if v) or "—")
    console.print(table)
    for row in r["rows"]:
        text = (
            f"{row['prompt']!r} → {row['completion']!r}"
            if "prompt" in row
            else f"{row['prompt_ids']} → {row['completion_ids']}"
        )
        scorer = f" (reward model v{row['reward_version']})" if row["reward_version"] else ""
        if row.get("annotator"):
            scorer += f" ({'chosen' if row['reward'] > 0 else 'rejected'}, by {row['annotator']})"
        task = f" [{row['task']}]" if row.get("task") else ""
        console.print(
            f"key {row['key']}{escape(task)} v{row['policy_version']} reward {row['reward']:.3g}{scorer} "
            f"A {row['advantage']:.3g} sampled {row['times_sampled']}×: {escape(text)}",
            highlight=False,
        )


def trim_histogram(histogram: list[int]) -> list[int]:
    last = max((i for i, v in enumerate(histogram) if v), default=0)
    return histogram[: last + 1]
