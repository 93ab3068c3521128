"""Re-scoring a stored table when the reward function or verifier changes.

The seed papers name reward-model staleness as a risk of replay: a rollout's reward (and so its
advantage) was computed by the reward function of its day. `rescore_table(table, reward_fn)`
computes new rewards for every stored rollout first — if `reward_fn` raises midway, the table is
untouched — then recomputes group advantages over the rollouts of each group that are still
stored, sets correctness at `correct_threshold`, and writes all of it in one locked, journaled
call (`ReplayTable.set_scores`; a prioritized table re-prioritises by the new |A|).

`llm-replay rescore DIR CONFIG` does this for a saved or durable table with the config's task,
tokenizer and reward limits: each rollout's prompt ids are matched to the task problem whose
encoded prompt they are, its completion decoded and scored (time-limited, as in training). With
`task.reward: model` the config's reward model scores the decoded prompt and completion instead,
and every rescored rollout is stamped with a new reward version (one above the newest stored), so
a run that resumes from the table sees them as scored by the current model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.buffer import ReplayTable, Sample

RewardFn = Callable[[Sample], Any]


@dataclass(frozen=True)
class RescoreReport:
    rollouts: int
    changed_rewards: int
    mean_reward_before: float | None
    mean_reward_after: float | None
    groups: int
    partial_groups: int  # groups with fewer stored members than the largest stored group

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rescore_table(
    table: ReplayTable,
    reward_fn: RewardFn,
    *,
    estimator: str = "grpo",
    correct_threshold: float = 1.0,
    chunk: int = 1024,
    reward_version: int | None = None,
) -> RescoreReport:
    """New rewards from `reward_fn(sample) -> [len(sample)]` for every stored rollout, then new
    group advantages (`estimator`) and correctness, and with `reward_version` that version on
    every row; all or nothing."""
    keys = table.storage.keys_of(table.storage.live_in_order())
    old = np.empty(len(keys))
    new = np.empty(len(keys))
    groups = np.empty(len(keys), dtype=np.int64)
    for start in range(0, len(keys), chunk):
        sample, _ = table.get(keys[start : start + chunk])
        values = np.asarray(reward_fn(sample), dtype=np.float64)
        if values.shape != (len(sample),) or not np.isfinite(values).all():
            raise ValueError(
                f"reward_fn: returned {values.shape} values for {len(sample)} rollouts "
                "(need one finite reward per rollout)"
            )
        end = start + len(sample)
        old[start:end], new[start:end] = sample.rewards, values
        groups[start:end] = sample.group_ids
    advantages = group_advantages(new, groups, estimator)
    correct = (new >= correct_threshold).astype(np.int64)
    versions = None if reward_version is None else np.full(len(keys), reward_version, np.int64)
    table.set_scores(keys, new, advantages, correct, reward_versions=versions)
    sizes = np.unique(groups, return_counts=True)[1] if len(groups) else np.zeros(0, np.int64)
    return RescoreReport(
        rollouts=len(keys),
        changed_rewards=int((old != new).sum()),
        mean_reward_before=float(old.mean()) if len(keys) else None,
        mean_reward_after=float(new.mean()) if len(keys) else None,
        groups=len(sizes),
        partial_groups=int((sizes < sizes.max()).sum()) if len(sizes) else 0,
    )


def task_reward_fn(config: Any) -> RewardFn:
    """Score stored rollouts with `config`'s task, tokenizer and reward limits."""
    from transformers import AutoTokenizer

    from llm_replay.models import encode_prompts
    from llm_replay.models.loading import resolve_model_path
    from llm_replay.runtime.task_builder import build_scorer, build_task
    from llm_replay.tasks.reward_model import ModelScorer

    task = build_task(config)
    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_path(config.model.path), local_files_only=True
    )
    problems = [*task.train, *task.eval]
    encoded = encode_prompts(tokenizer, [p.prompt for p in problems], config.model.chat_template)
    by_prompt = {tuple(ids): p for ids, p in zip(encoded, problems, strict=True)}
    scorer = build_scorer(config, task)

    def reward_fn(sample: Sample) -> np.ndarray:
        completions: list[str] = []
        matched = []
        for i in range(len(sample)):
            p, c = int(sample.prompt_lengths[i]), int(sample.completion_lengths[i])
            ids = sample.input_ids[i][sample.attention_mask[i] > 0]
            problem = by_prompt.get(tuple(ids[:p].tolist()))
            if problem is None:
                raise ValueError(
                    f"rollout key {int(sample.keys[i])}: its prompt is not a problem of task "
                    f"{task.name!r} as configured (another task, template or tokenizer?)"
                )
            matched.append(problem)
            completions.append(str(tokenizer.decode(ids[p : p + c], skip_special_tokens=True)))
        if isinstance(scorer, ModelScorer):
            return scorer.score_rows(tokenizer, sample.to_batch())
        return scorer.score(completions, matched)

    return reward_fn


def rescore_directory(path: str | Path, config: Any, *, dry_run: bool = False) -> RescoreReport:
    """Rescore the table in `path` (saved or durable) in place; `dry_run` changes nothing."""
    from llm_replay.buffer.durable import is_durable_dir
    from llm_replay.buffer.table_state import table_arguments

    path = Path(path)
    reward_fn = task_reward_fn(config)
    estimator = config.algorithm.advantage
    threshold = config.task.correct_threshold
    version = None
    if config.task.reward == "model":
        threshold = config.reward_model.success_threshold
        stored = ReplayTable.read(path)
        live = stored.storage.live_slots()
        version = int(stored.storage.reward_version[live].max(initial=-1)) + 1
    if dry_run or not is_durable_dir(path):
        table = ReplayTable.read(path)
        report = rescore_table(
            table,
            reward_fn,
            estimator=estimator,
            correct_threshold=threshold,
            reward_version=version,
        )
        if not dry_run:
            table.save(path)
        return report
    arguments = table_arguments(ReplayTable.read(path).state()[0])
    table = ReplayTable.open(path, **arguments)
    try:
        return rescore_table(
            table,
            reward_fn,
            estimator=estimator,
            correct_threshold=threshold,
            reward_version=version,
        )
    finally:
        table.close()
