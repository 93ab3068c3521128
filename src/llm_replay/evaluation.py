"""Held-out evaluation: greedy accuracy, pass@k with the unbiased estimator, policy entropy.

Problems tagged with a task (a mixture's members, `tasks.TASK_TAG`) also get their own readings
beside the overall ones: `eval/<task>/accuracy`, and on the pass@k subset `eval/<task>/pass@k`
and `eval/<task>/entropy` (a member's share of the first `pass_size` problems follows the eval
split's weights, so set `eval.pass_size` to give each member enough problems).

pass@k = 1 − C(n−c, k)/C(n, k) per problem (Chen et al. 2021), averaged over problems, from n
samples at the training temperature; the mean token entropy of the policy is measured on those
same samples. Evaluation draws from its own seeded RNG so evaluating more or less often never
changes the training run.

`eval/distinct` is the split's effective number of distinct problems (`distinct_problems`): a
small generator space repeats prompts, greedy decoding answers a repeated prompt the same way
each time, and the accuracy then moves as one over that many problems, not `eval/size` (on the
suite's lcm, 500 rows are 48 prompts, 27 effective).

`CORRECT_ROWS` holds each row's greedy verdict, in the split's order, as a string of 0s and 1s
(500 bytes an evaluation; kept outside the `eval/` keys, which are all numbers): two runs on the
same split answer the same problems, so a comparison of them can be paired problem by problem
(`experiments/final_gap.py`) instead of reading each accuracy's noise on its own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.metrics.logging import CORRECT_ROWS
from llm_replay.tasks import Problem, SafeScorer, task_tag


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with c correct of n samples."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass_at_k(n={n}, c={c}, k={k}): need 0 <= c <= n and k >= 1")
    if k > n:
        raise ValueError(f"pass_at_k: k = {k} exceeds the n = {n} samples drawn")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def distinct_problems(problems: Sequence[Problem]) -> float:
    """(Σc)² / Σc² over each distinct prompt's count c: the number of equally weighted independent
    problems whose mean varies as much as the accuracy over `problems` does."""
    counts = np.array(list(Counter(p.prompt for p in problems).values()), dtype=np.float64)
    if not counts.size:
        raise ValueError("problems: empty; an evaluation needs at least one problem")
    return float(counts.sum() ** 2 / (counts**2).sum())


def evaluate(
    generator: HFGenerator,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    problems: Sequence[Problem],
    scorer: SafeScorer,
    *,
    sampling: SamplingParams,
    pass_k: Sequence[int],
    pass_size: int,
    seed: int,
    batch_rollouts: int = 512,
) -> dict[str, Any]:
    """Greedy accuracy on all `problems` (and each row's verdict, `CORRECT_ROWS`); pass@k and
    entropy on the first `pass_size`."""
    threshold = scorer.task.correct_threshold
    greedy = SamplingParams(sampling.max_new_tokens, temperature=0.0)
    correct = []
    for start in range(0, len(prompts), batch_rollouts):
        out = generator.generate(prompts[start : start + batch_rollouts], 1, greedy)
        texts = tokenizer.batch_decode(out.completions(), skip_special_tokens=True)
        rewards = scorer.score(texts, problems[start : start + batch_rollouts])
        correct.extend((rewards >= threshold).tolist())
    metrics: dict[str, Any] = {
        "eval/accuracy": float(np.mean(correct)),
        "eval/size": float(len(correct)),
        "eval/distinct": distinct_problems(problems),
        CORRECT_ROWS: "".join("1" if c else "0" for c in correct),
    }
    metrics.update(accuracy_by_task(problems, correct))
    if pass_size:
        n = max(pass_k)
        rng = generator.seeded_rng(seed)
        subset = list(range(min(pass_size, len(prompts))))
        per_call = max(1, batch_rollouts // n)
        counts, entropies, token_tags = [], [], []
        for start in range(0, len(subset), per_call):
            idx = subset[start : start + per_call]
            out = generator.generate([prompts[i] for i in idx], n, sampling, rng=rng)
            texts = tokenizer.batch_decode(out.completions(), skip_special_tokens=True)
            rewards = scorer.score(texts, [problems[i] for i in idx for _ in range(n)])
            counts.extend((rewards.reshape(len(idx), n) >= threshold).sum(1).tolist())
            entropies.append(out.entropies)
            row_tags = np.repeat(np.array([task_tag(problems[i]) for i in idx], dtype=object), n)
            token_tags.append(np.repeat(row_tags, out.completion_lengths))
        tags = np.array([task_tag(problems[i]) for i in subset], dtype=object)
        every_token = np.concatenate(entropies)
        tag_of_token = np.concatenate(token_tags)
        for name in [""] + [t for t in dict.fromkeys(tags.tolist()) if t]:
            rows = np.ones(len(tags), dtype=bool) if not name else tags == name
            tokens = np.ones(len(every_token), dtype=bool) if not name else tag_of_token == name
            key = "eval/" if not name else f"eval/{name}/"
            for k in pass_k:
                metrics[f"{key}pass@{k}"] = float(
                    np.mean([pass_at_k(n, c, k) for c, r in zip(counts, rows, strict=True) if r])
                )
            metrics[f"{key}entropy"] = float(every_token[tokens].mean()) if tokens.any() else 0.0
    return metrics


def accuracy_by_task(problems: Sequence[Problem], correct: Sequence[bool]) -> dict[str, float]:
    """`eval/<task>/accuracy` for each task tag among `problems` (a mixture's members, in order
    of first appearance); nothing when no problem carries a tag. `eval/accuracy` stays the
    overall mean, weighted as the eval split is."""
    tags = [task_tag(p) for p in problems[: len(correct)]]
    out: dict[str, float] = {}
    for name in dict.fromkeys(t for t in tags if t):
        hits = [c for c, t in zip(correct, tags, strict=True) if t == name]
        out[f"eval/{name}/accuracy"] = float(np.mean(hits))
    return out


class Evaluator:
    """The run's held-out evaluation of one generator's current weights (config `eval:`)."""

    def __init__(
        self,
        generator: HFGenerator,
        tokenizer: Any,
        prompts: Sequence[Sequence[int]],
        problems: Sequence[Problem],
        scorer: SafeScorer,
        *,
        sampling: SamplingParams,
        pass_k: Sequence[int],
        pass_size: int,
        seed: int,
    ) -> None:
        self.generator, self.tokenizer, self.scorer = generator, tokenizer, scorer
        self.prompts, self.problems = prompts, problems
        self.sampling, self.pass_k, self.pass_size, self.seed = sampling, pass_k, pass_size, seed

    def __call__(self, iteration: int) -> dict[str, Any]:
        """Metrics at `iteration`; its pass@k draws depend on the iteration, not on history."""
        return evaluate(
            self.generator,
            self.tokenizer,
            self.prompts,
            self.problems,
            self.scorer,
            sampling=self.sampling,
            pass_k=self.pass_k,
            pass_size=self.pass_size,
            seed=self.seed + 7919 * (iteration + 1),
        )
