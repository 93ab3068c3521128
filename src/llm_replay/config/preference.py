"""`preference:` — train on preference pairs (online DPO/IPO) and replay the annotated pairs.

With `enabled: true` a run learns from pairs instead of GRPO advantages: every iteration it draws
`generation.prompts_per_step` prompts, samples `group_size` completions each, pairs them up at
random within the group (`pairs_per_group` disjoint pairs) and asks the `annotator` which of each
pair is better; a tie makes no pair. The annotated pairs go into a pair table (two rows a pair in
a `ReplayTable`, with the annotator, its version and cost, and the reference log-prob of each
completion taken at generation), and each gradient step trains `batch_pairs` pairs: the fresh
ones first, then pairs replayed from the table (`replay`: none, uniform, recency, margin). With
`annotate: when_stale` new pairs are asked for only when the stored ones stop teaching (their
mean σ(−h), the DPO loss's own "how wrong is the policy on this pair", falls below
`stale_threshold`); `annotation_budget` caps the annotations a run may ask for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llm_replay.config.parse import ConfigError, check_positive, did_you_mean, setting

ANNOTATOR_CHOICES = ("verifier", "reward_model", "none")
REPLAY_CHOICES = ("none", "uniform", "recency", "margin")
CORRECTIONS = ("none", "truncated_is")


@dataclass
class PreferenceConfig:
    enabled: bool = setting(False, "train on annotated preference pairs instead of GRPO")
    annotator: str = setting(
        "verifier",
        "who judges a pair online: verifier (the task's, standing in for a person), "
        "reward_model (reward_model.path as a pairwise judge), none (only the file's pairs)",
    )
    file: str | None = setting(
        None, "a JSONL or Parquet file of given pairs (prompt, chosen, rejected) loaded at start"
    )
    annotation_cost: float = setting(1.0, "what one pair judged costs, in annotation units")
    annotation_budget: float = setting(0.0, "annotation units a run may spend; 0: unlimited")
    annotate: str = setting(
        "always",
        "always: new pairs every iteration; when_stale: only when stored pairs stop teaching",
    )
    stale_threshold: float = setting(
        0.3, "when_stale: annotate when the stored pairs' mean σ(−h) falls below this"
    )
    min_margin: float = setting(
        0.0, "reward_model judge: a score gap at most this is a tie (no pair)"
    )
    timeout_s: float = setting(60.0, "seconds one annotation call may take")
    pairs_per_group: int = setting(
        2, "disjoint candidate pairs drawn from each group, at most (a group of G holds G // 2)"
    )
    loss: str = setting("dpo", "the pair loss (`llm-replay losses`): dpo, ipo, slic")
    beta: float = setting(0.1, "β: the implicit reward's scale (DPO's KL strength)")
    batch_pairs: int = setting(
        64,
        "pairs per gradient step: the round's fresh pairs (all of them, in its first step), then "
        "replayed pairs up to this",
    )
    steps_per_iteration: int = setting(1, "gradient steps per iteration")
    replay: str = setting(
        "none",
        "how stored pairs are drawn: none (fresh pairs only, online DPO), uniform, recency "
        "(newer pairs likelier), margin (pairs the policy still gets wrong likelier)",
    )
    capacity: int = setting(2048, "pairs the table keeps (oldest evicted first)")
    max_age: int | None = setting(None, "evict pairs generated more than this many versions ago")
    recency_half_life: float = setting(8.0, "recency: versions after which a pair's weight halves")
    priority_exponent: float = setting(1.0, "margin: weight = σ(−h)^exponent")
    stale_pairs: str = setting(
        "keep",
        "reward_model judge refreshed (reward_model.refresh_every): keep the pairs an older judge "
        "made, or evict them",
    )
    correction: str = setting(
        "none", "off-policy weight of a replayed pair: none or truncated_is (ratio of both sides)"
    )
    is_cap: float = setting(2.0, "truncated_is: the pair weight's upper bound")

    def check(self) -> None:
        choices = {
            "annotator": ANNOTATOR_CHOICES,
            "annotate": ("always", "when_stale"),
            "replay": REPLAY_CHOICES,
            "correction": CORRECTIONS,
            "stale_pairs": ("keep", "evict"),
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                hint = did_you_mean(value, allowed)
                raise ConfigError(f"{name} = {value!r}: choose one of {allowed}{hint}")
        from llm_replay.algorithms.losses.pairs import PAIR_LOSSES

        if self.loss not in PAIR_LOSSES:
            hint = did_you_mean(self.loss, PAIR_LOSSES)
            raise ConfigError(f"loss = {self.loss!r}: choose one of {sorted(PAIR_LOSSES)}{hint}")
        for name in ("annotation_cost", "annotation_budget", "min_margin"):
            check_positive(name, getattr(self, name), zero_ok=True)
        for name in ("timeout_s", "beta", "recency_half_life", "priority_exponent", "is_cap"):
            check_positive(name, getattr(self, name))
        for name in ("pairs_per_group", "batch_pairs", "steps_per_iteration", "capacity"):
            check_positive(name, getattr(self, name))
        if self.max_age is not None:
            check_positive("max_age", self.max_age)
        if not 0 < self.stale_threshold < 1:
            raise ConfigError(f"stale_threshold = {self.stale_threshold!r}: must be in (0, 1)")
        if self.file is not None and not Path(self.file).is_file():
            raise ConfigError(f"file = {self.file!r}: no such file")
        if self.annotator == "none" and self.file is None:
            raise ConfigError("annotator = 'none': needs preference.file (the pairs to learn from)")
        if self.annotator == "none" and self.replay == "none":
            raise ConfigError(
                "annotator = 'none': needs replay (uniform, recency or margin) to draw the file's "
                "pairs; with replay = 'none' nothing would train"
            )
        if self.annotate == "when_stale" and self.replay == "none":
            raise ConfigError(
                "annotate = 'when_stale': needs replay (stored pairs to learn from meanwhile)"
            )
