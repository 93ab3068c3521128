"""Replay-buffer benchmark: llm-replay's ReplayTable against TorchRL's replay buffer, same run.

Workload (LLM-shaped): GRPO groups of 8 rollouts that share one prompt (lengths uniform in
32..128 tokens), completion lengths uniform in 16..2048 (scenario `long`, 100k rollouts) or
16..256 (scenario `short`, 1M rollouts). Each side receives the same ragged numpy arrays (one
array per rollout; a group's rows hold the same prompt), inserts them 256 rollouts per call
(one generation step), then draws batches of 256 uniformly at random with replacement, and must
hand back learner-ready arrays: right-padded input ids (prompt + completion) [B, T] int32,
behaviour log-probs aligned with them [B, T] float32 (0 outside the completion), attention and
loss masks [B, T] bool, T = the longest rollout in the batch.

`llm-replay-threads` is the same table with the compiled gather spread over every CPU the process
may use (`set_gather_threads`); the row-gather rate it is read against is single-threaded, so its
fraction can pass 100%. On a machine whose other cores are busy it measures contention, not the
kernel.

Peers (TorchRL 0.14, torch 2.13 CPU), each given the layout that suits it best:
- `torchrl-lazy`: LazyTensorStorage of fixed-width rows (sequences padded to the longest possible
  prompt + completion) + RandomSampler; insert pads the batch, sample trims to the batch maximum.
- `torchrl-list`: ListStorage of per-rollout tensors (sequence + aligned log-probs) +
  RandomSampler; sample pads with `pad_sequence`.
TorchRL's prioritized sampler needs its compiled segment tree, which does not load against
torch 2.13 here, so prioritized sampling is compared with `numpy-cumsum`: the best few-line
alternative (cumulative sum + searchsorted over all priorities per batch) on the same storage.

Each (scenario, implementation) runs in its own subprocess so resident memory (RSS growth while
filling, input data excluded) is measured cleanly. It is reported against two payloads:
every rollout with its own prompt (`x payload`: what a per-rollout layout must hold) and each
group's prompt once (`x distinct`: the information actually there; llm-replay stores prompts
this way). Library imports are loaded before the baseline
(TorchRL's, and llm-replay's compiled kernels, JIT-compiled on first use): a once-per-process
cost, not the table's; numba's own resident cost is reported beside it (`jit_runtime_bytes`).
Figures are printed as a table with ratios to the best peer; `--json PATH` writes them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from synthetic import warm_kernels

BATCH = 256
INSERT_BATCH = 256
GROUP = 8
PROMPT_RANGE = (32, 128)
SCENARIOS = {
    "long": {"rollouts": 100_000, "completion": (16, 2048), "sample_calls": 300},
    "short": {"rollouts": 1_000_000, "completion": (16, 256), "sample_calls": 2000},
}
IMPLEMENTATIONS = (
    "llm-replay",
    "llm-replay-threads",
    "llm-replay-numpy",
    "torchrl-lazy",
    "torchrl-list",
    "llm-replay-prioritized",
    "numpy-cumsum",
)
PEER_OF = {
    "llm-replay": ("torchrl-lazy", "torchrl-list"),
    "llm-replay-threads": ("torchrl-lazy", "torchrl-list"),
    "llm-replay-numpy": ("torchrl-lazy", "torchrl-list"),
    "llm-replay-prioritized": ("numpy-cumsum",),
}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class Workload:
    prompts: list[np.ndarray]
    completions: list[np.ndarray]
    logprobs: list[np.ndarray]
    rewards: np.ndarray
    advantages: np.ndarray
    tokens: int
    completion_tokens: int
    distinct_prompt_tokens: int  # each group's prompt counted once

    @classmethod
    def make(cls, n: int, completion: tuple[int, int], seed: int = 0) -> Workload:
        """n rollouts in GRPO groups of GROUP (one prompt each), rows of a group adjacent."""
        rng = np.random.default_rng(seed)
        groups = -(-n // GROUP)
        g_len = rng.integers(PROMPT_RANGE[0], PROMPT_RANGE[1] + 1, groups)
        c_len = rng.integers(completion[0], completion[1] + 1, n)
        g_flat = rng.integers(0, 151_000, int(g_len.sum()), dtype=np.int32)
        c_flat = rng.integers(0, 151_000, int(c_len.sum()), dtype=np.int32)
        l_flat = -rng.exponential(1.0, int(c_len.sum())).astype(np.float32)
        g_off = np.concatenate(([0], np.cumsum(g_len)))
        c_off = np.concatenate(([0], np.cumsum(c_len)))
        group_prompts = [g_flat[g_off[g] : g_off[g + 1]] for g in range(groups)]
        p_len = g_len[np.arange(n) // GROUP]
        return cls(
            prompts=[group_prompts[i // GROUP] for i in range(n)],
            completions=[c_flat[c_off[i] : c_off[i + 1]] for i in range(n)],
            logprobs=[l_flat[c_off[i] : c_off[i + 1]] for i in range(n)],
            rewards=rng.random(n),
            advantages=rng.normal(size=n),
            tokens=int(p_len.sum() + c_len.sum()),
            completion_tokens=int(c_len.sum()),
            distinct_prompt_tokens=int(g_len.sum()),
        )


# ------------------------------------------------------------------------- implementations
class LlmReplay:
    def __init__(self, capacity: int, prioritized: bool) -> None:
        from llm_replay.buffer import Prioritized, ReplayTable, Uniform

        sampler = Prioritized(alpha=0.5, beta=0.4) if prioritized else Uniform(replacement=True)
        self.table = ReplayTable(capacity, sampler=sampler, seed=0)

    def insert(self, w: Workload, lo: int, hi: int) -> None:
        from llm_replay.data.batch import RolloutBatch

        batch = RolloutBatch.from_ragged(
            prompt_ids=w.prompts[lo:hi],
            completion_ids=w.completions[lo:hi],
            behaviour_logprobs=w.logprobs[lo:hi],
            rewards=w.rewards[lo:hi],
            advantages=w.advantages[lo:hi],
            group_ids=np.arange(lo, hi) // GROUP,
            policy_versions=0,
        )
        self.table.insert(batch)

    def sample(self) -> tuple[np.ndarray, ...]:
        s = self.table.sample(BATCH)
        return s.input_ids, s.behaviour_logprobs, s.attention_mask, s.loss_mask


class NumpyCumsumPrioritized(LlmReplay):
    """Prioritized sampling the simple way: cumsum over every priority, then searchsorted."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, prioritized=False)
        self.priorities = np.zeros(capacity)
        self.rng = np.random.default_rng(0)

    def insert(self, w: Workload, lo: int, hi: int) -> None:
        super().insert(w, lo, hi)
        slots = self.table.storage.dense[self.table.size - (hi - lo) : self.table.size]
        self.priorities[slots] = np.power(np.abs(w.advantages[lo:hi]) + 1e-6, 0.5)

    def sample(self) -> tuple[np.ndarray, ...]:
        cdf = np.cumsum(self.priorities)
        slots = np.searchsorted(cdf, self.rng.random(BATCH) * cdf[-1], side="right")
        st = self.table.storage
        p = self.priorities[slots] / cdf[-1]
        _ = np.power(p / (self.priorities[self.priorities > 0].min() / cdf[-1]), -0.4)
        return st.gather_padded(slots.astype(np.int64))


class TorchRLLazy:
    def __init__(self, capacity: int, width: int) -> None:
        import torch
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        from torchrl.data.replay_buffers.samplers import RandomSampler

        torch.manual_seed(0)
        self.torch = torch
        self.width = width
        self.rb = ReplayBuffer(
            storage=LazyTensorStorage(capacity), sampler=RandomSampler(), batch_size=BATCH
        )

    def insert(self, w: Workload, lo: int, hi: int) -> None:
        from tensordict import TensorDict

        torch = self.torch
        n = hi - lo
        ids = np.zeros((n, self.width), dtype=np.int32)
        lps = np.zeros((n, self.width), dtype=np.float32)
        p_len = np.empty(n, dtype=np.int64)
        c_len = np.empty(n, dtype=np.int64)
        for row, i in enumerate(range(lo, hi)):
            p, c = len(w.prompts[i]), len(w.completions[i])
            ids[row, :p] = w.prompts[i]
            ids[row, p : p + c] = w.completions[i]
            lps[row, p : p + c] = w.logprobs[i]
            p_len[row], c_len[row] = p, c
        td = TensorDict(
            {
                "input_ids": torch.from_numpy(ids),
                "logprobs": torch.from_numpy(lps),
                "prompt_len": torch.from_numpy(p_len),
                "length": torch.from_numpy(p_len + c_len),
                "reward": torch.from_numpy(w.rewards[lo:hi]),
            },
            batch_size=[n],
        )
        self.rb.extend(td)

    def sample(self) -> tuple[np.ndarray, ...]:
        torch = self.torch
        td = self.rb.sample()
        length = td["length"]
        width = int(length.max())
        ar = torch.arange(width)
        attention = ar < length[:, None]
        loss = attention & (ar >= td["prompt_len"][:, None])
        ids = td["input_ids"][:, :width] * attention
        lps = td["logprobs"][:, :width]
        return ids.numpy(), lps.numpy(), attention.numpy(), loss.numpy()


class TorchRLList:
    def __init__(self, capacity: int) -> None:
        import torch
        from torchrl.data import ListStorage, ReplayBuffer
        from torchrl.data.replay_buffers.samplers import RandomSampler

        torch.manual_seed(0)
        self.torch = torch
        self.rb = ReplayBuffer(
            storage=ListStorage(capacity),
            sampler=RandomSampler(),
            batch_size=BATCH,
            collate_fn=lambda items: items,
        )

    def insert(self, w: Workload, lo: int, hi: int) -> None:
        torch = self.torch
        items = []
        for i in range(lo, hi):
            p = len(w.prompts[i])
            seq = torch.from_numpy(np.concatenate((w.prompts[i], w.completions[i])))
            lp = torch.from_numpy(np.concatenate((np.zeros(p, np.float32), w.logprobs[i])))
            items.append((seq, lp, p, float(w.rewards[i])))
        self.rb.extend(items)

    def sample(self) -> tuple[np.ndarray, ...]:
        torch = self.torch
        from torch.nn.utils.rnn import pad_sequence

        items = self.rb.sample()
        ids = pad_sequence([it[0] for it in items], batch_first=True)
        lps = pad_sequence([it[1] for it in items], batch_first=True)
        length = torch.tensor([len(it[0]) for it in items])
        p_len = torch.tensor([it[2] for it in items])
        ar = torch.arange(ids.shape[1])
        attention = ar < length[:, None]
        loss = attention & (ar >= p_len[:, None])
        return ids.numpy(), lps.numpy(), attention.numpy(), loss.numpy()


def gather_threads_for(name: str) -> int:
    """`llm-replay-threads` gathers on every CPU this process may use (at most numba's limit)."""
    if name != "llm-replay-threads":
        return 1
    import numba

    return max(1, min(len(os.sched_getaffinity(0)), numba.config.NUMBA_NUM_THREADS))


def build(name: str, capacity: int, width: int) -> object:
    if name in ("llm-replay", "llm-replay-numpy", "llm-replay-threads"):
        from llm_replay.buffer.kernels import set_gather_backend, set_gather_threads

        set_gather_backend("numpy" if name == "llm-replay-numpy" else "auto")
        set_gather_threads(gather_threads_for(name))
        return LlmReplay(capacity, prioritized=False)
    if name == "llm-replay-prioritized":
        return LlmReplay(capacity, prioritized=True)
    if name == "numpy-cumsum":
        return NumpyCumsumPrioritized(capacity)
    if name == "torchrl-lazy":
        return TorchRLLazy(capacity, width)
    if name == "torchrl-list":
        return TorchRLList(capacity)
    raise ValueError(f"unknown implementation {name!r}")


def check_output(out: tuple[np.ndarray, ...]) -> None:
    ids, lps, attention, loss = out
    assert ids.dtype == np.int32 and lps.dtype == np.float32, (ids.dtype, lps.dtype)
    assert ids.shape == lps.shape == attention.shape == loss.shape and ids.shape[0] == BATCH
    assert not (ids[~attention]).any() and not (lps[~loss]).any() and (lps[loss] <= 0).all()
    assert attention[:, -1].any(), "width must be the batch's longest rollout"


def load_kernels(name: str) -> int:
    """Load (and, the first time, compile) the compiled kernels before the baseline, as the peers'
    imports are: JIT compilation and numba's runtime are a once-per-process cost, not the table's.
    Returns the resident bytes that cost (0 with the numpy backend)."""
    from llm_replay.buffer.kernels import set_gather_backend, set_gather_threads

    set_gather_backend("numpy" if name == "llm-replay-numpy" else "auto")
    gc.collect()
    before = rss_bytes()
    warm_kernels()
    set_gather_threads(gather_threads_for(name))  # compiles the threaded kernel, starts its pool
    gc.collect()
    return max(0, rss_bytes() - before)


def run_one(scenario: str, name: str, scale: float) -> dict[str, object]:
    spec = SCENARIOS[scenario]
    n = max(INSERT_BATCH * 4, int(spec["rollouts"] * scale))  # type: ignore[call-overload]
    calls = max(20, int(spec["sample_calls"] * min(1.0, scale * 10)))  # type: ignore[call-overload]
    completion = spec["completion"]
    workload = Workload.make(n, completion)  # type: ignore[arg-type]
    width = PROMPT_RANGE[1] + completion[1]  # type: ignore[index]
    if name.startswith("torchrl"):  # imports are not storage: load them before the baseline
        import tensordict  # noqa: F401
        import torch  # noqa: F401
        import torchrl.data  # noqa: F401
    ours = name.startswith("llm-replay") or name == "numpy-cumsum"  # numpy-cumsum: our storage
    jit_bytes = load_kernels(name) if ours else 0
    gc.collect()
    rss0 = rss_bytes()
    impl = build(name, n, width)
    start = time.perf_counter()
    for lo in range(0, n, INSERT_BATCH):
        impl.insert(workload, lo, min(n, lo + INSERT_BATCH))  # type: ignore[attr-defined]
    insert_s = time.perf_counter() - start
    gc.collect()
    resident = rss_bytes() - rss0
    check_output(impl.sample())  # type: ignore[attr-defined]
    for _ in range(5):
        impl.sample()  # type: ignore[attr-defined]
    latencies = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        impl.sample()  # type: ignore[attr-defined]
        latencies[i] = time.perf_counter_ns() - t0
    payload = 4 * workload.tokens + 4 * workload.completion_tokens
    distinct_payload = 4 * (workload.distinct_prompt_tokens + 2 * workload.completion_tokens)
    extra: dict[str, object] = {}
    if name.startswith("llm-replay"):
        from llm_replay.buffer.kernels import gather_backend, gather_threads

        out = impl.sample()  # type: ignore[attr-defined]
        batch_bytes = sum(a.nbytes for a in out)
        bandwidth = row_gather_bandwidth(payload // 4, out[0].shape[1])
        rate = 1e9 / latencies.mean()
        extra = {
            "gather_backend": gather_backend(),
            "gather_threads": gather_threads(),
            "jit_runtime_bytes": jit_bytes,
            "batch_bytes": batch_bytes,
            "row_gather_bytes_per_s": bandwidth,
            "fraction_of_row_gather_bandwidth": batch_bytes * rate / bandwidth,
        }
    return {
        "scenario": scenario,
        "implementation": name,
        "rollouts": n,
        "tokens": workload.tokens,
        "insert_rollouts_per_s": n / insert_s,
        "sample_batches_per_s": 1e9 / latencies.mean(),
        "sample_p50_us": float(np.percentile(latencies, 50) / 1e3),
        "sample_p99_us": float(np.percentile(latencies, 99) / 1e3),
        "resident_bytes": resident,
        "resident_bytes_per_token": resident / workload.tokens,
        "resident_vs_payload": resident / payload,
        "resident_vs_distinct_payload": resident / distinct_payload,
        **extra,
    }


def row_gather_bandwidth(units: int, width: int, reps: int = 30) -> float:
    """Bytes per second written by the plainest random row gather on this machine: BATCH rows of
    `width` int32 at random offsets of an array as large as the table's payload, one numpy fancy
    index (output bytes counted once; the rows read are the same number of bytes)."""
    rng = np.random.default_rng(0)
    source = rng.integers(0, 1 << 30, units + width, dtype=np.int32)
    windows = np.lib.stride_tricks.sliding_window_view(source, width)
    best = np.inf
    for _ in range(reps):
        offsets = rng.integers(0, units, BATCH)
        t0 = time.perf_counter_ns()
        windows[offsets].copy()
        best = min(best, time.perf_counter_ns() - t0)
    return BATCH * width * 4 / (best / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--impl", choices=IMPLEMENTATIONS, action="append")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each scenario's size")
    parser.add_argument("--quick", action="store_true", help="same as --scale 0.05")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    scale = 0.05 if args.quick else args.scale
    if not 0 < scale <= 1:
        parser.error(f"--scale = {scale}: must be in (0, 1]")
    scenarios = args.scenario or list(SCENARIOS)
    impls = args.impl or list(IMPLEMENTATIONS)
    if args.child:
        print(json.dumps(run_one(scenarios[0], impls[0], scale)))
        return
    results = []
    for scenario in scenarios:
        for name in impls:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                "--scenario",
                scenario,
                "--impl",
                name,
                "--scale",
                str(scale),
            ]
            print(f"running {scenario} / {name} ...", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"benchmark child failed: {scenario} / {name}")
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    report = summarise(results)
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def summarise(results: list[dict[str, object]]) -> list[dict[str, object]]:
    by_key = {(r["scenario"], r["implementation"]): r for r in results}
    for r in results:
        peers = [
            by_key[(r["scenario"], p)]
            for p in PEER_OF.get(str(r["implementation"]), ())
            if (r["scenario"], p) in by_key
        ]
        if not peers:
            continue
        best_insert = max(peers, key=lambda p: p["insert_rollouts_per_s"])  # type: ignore[arg-type, return-value]
        best_sample = max(peers, key=lambda p: p["sample_batches_per_s"])  # type: ignore[arg-type, return-value]
        r["ratio_vs_peer"] = {
            "insert": r["insert_rollouts_per_s"] / best_insert["insert_rollouts_per_s"],  # type: ignore[operator]
            "insert_peer": best_insert["implementation"],
            "sample": r["sample_batches_per_s"] / best_sample["sample_batches_per_s"],  # type: ignore[operator]
            "sample_peer": best_sample["implementation"],
        }
    return results


def print_table(results: list[dict[str, object]]) -> None:
    head = (
        f"{'scenario':8} {'implementation':24} {'insert/s':>10} {'batches/s':>10} "
        f"{'p50 us':>8} {'p99 us':>8} {'B/token':>8} {'x payload':>9} {'x distinct':>10}  "
        "ratio vs best peer"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        ratio = r.get("ratio_vs_peer")
        note = (
            (
                f"insert {ratio['insert']:.2f}x ({ratio['insert_peer']}), "  # type: ignore[index]
                f"sample {ratio['sample']:.2f}x ({ratio['sample_peer']})"
            )
            if ratio
            else ""
        )  # type: ignore[index]
        if "fraction_of_row_gather_bandwidth" in r:
            note += "; " if note else ""
            note += (
                f"{r['gather_backend']} gather on {r.get('gather_threads', 1)} thread(s), "
                f"{100 * r['fraction_of_row_gather_bandwidth']:.0f}% "  # type: ignore[operator]
                f"of the machine's row-gather rate ({r['row_gather_bytes_per_s'] / 2**30:.1f} GiB/s)"  # type: ignore[operator]
            )
        print(
            f"{r['scenario']:8} {r['implementation']:24} {r['insert_rollouts_per_s']:>10.0f} "
            f"{r['sample_batches_per_s']:>10.0f} {r['sample_p50_us']:>8.0f} {r['sample_p99_us']:>8.0f} "
            f"{r['resident_bytes_per_token']:>8.2f} {r['resident_vs_payload']:>9.2f} "
            f"{r['resident_vs_distinct_payload']:>10.2f}  {note}"
        )


if __name__ == "__main__":
    main()
