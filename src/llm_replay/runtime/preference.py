"""The preference loop: generate → annotate pairs → pair table → pair batches → DPO/IPO steps.

`PreferenceTrainer` is the synchronous loop (`runtime.sync`) with pairs in place of advantages.
One iteration: unless the annotation budget is spent or (`annotate: when_stale`) the stored pairs
still teach, draw `prompts_per_step` prompts, sample `group_size` completions each with the
current weights, have the annotator judge `pairs_per_group` random pairs of each group, take the
reference log-probs of the pairs kept and store them; then take `steps_per_iteration` gradient
steps of `batch_pairs` pairs each, the fresh pairs first and the rest replayed from the table.
Held-out accuracy stays the task's verifier's. Annotations are counted on their own meter
(`compute/annotations`, the `annotations` basis); the reference forwards are charged as
forward-only tokens, and the task's reward on every fresh rollout is computed as monitoring.
A checkpoint holds the pair table, its index and the annotation counts with everything
`SyncTrainer` saves; a resumed run logs what an uninterrupted one does.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.algorithms.losses.pairs import build_pair_loss
from llm_replay.buffer import Sample
from llm_replay.config import Config
from llm_replay.preference.annotators import (
    AnnotationCounts,
    Annotator,
    RewardModelJudge,
    SafeAnnotator,
    VerifierAnnotator,
)
from llm_replay.preference.files import file_pairs
from llm_replay.preference.pairs import PairMaker, ReferenceScorer
from llm_replay.preference.replay import PairReplay
from llm_replay.preference.step import preference_step
from llm_replay.runtime.loop import summarise_steps
from llm_replay.runtime.sync import SyncTrainer
from llm_replay.tasks.reward_model import ModelScorer

log = logging.getLogger(__name__)

PAIRS_DIR = "pairs"


class PreferenceTrainer(SyncTrainer):
    def __init__(self, config: Config, *, run_dir: Path | None = None) -> None:
        super().__init__(config, run_dir=run_dir)
        p = config.preference
        self.settings = p
        self.pair_loss = build_pair_loss(p.loss, p.beta)
        reference = copy.deepcopy(self.model)  # the initial weights, before any step or resume
        self.reference = ReferenceScorer(
            reference,
            temperature=config.generation.temperature,
            micro_batch=config.train.micro_batch_size,
        )
        self.pairs = PairReplay.from_settings(p, seed=config.train.seed)
        self.annotator: SafeAnnotator | None = None
        self.pair_maker: PairMaker | None = None
        self._round_prompts: dict[int, int] = {}
        if p.annotator != "none":
            judge: Annotator
            if p.annotator == "reward_model":
                assert isinstance(self.scorer, ModelScorer)
                judge = RewardModelJudge(self.scorer.model, min_margin=p.min_margin)
            else:
                judge = VerifierAnnotator(self.task)
            self.annotator = SafeAnnotator(judge, timeout_s=p.timeout_s, cost=p.annotation_cost)
            self.pair_maker = PairMaker(
                self.annotator,
                self.reference,
                self.tokenizer,
                pairs_per_group=p.pairs_per_group,
                seed=config.train.seed,
            )
        self.file_pairs = 0
        if p.file is not None:
            loaded = file_pairs(
                p.file, self.tokenizer, self.reference, chat_template=config.model.chat_template
            )
            self.pairs.insert(loaded)
            self.file_pairs = len(loaded) // 2

    # ------------------------------------------------------------------ one iteration
    def annotation_due(self) -> bool:
        p = self.settings
        if self.annotator is None:
            return False
        left = self._pairs_left()
        if left is not None and left <= 0:
            return False
        if p.annotate == "when_stale":
            signal = self.pairs.stale_signal()
            return (
                math.isnan(signal)
                or signal < p.stale_threshold
                or len(self.pairs) < (p.batch_pairs)
            )
        return True

    def train_iteration(self) -> dict[str, Any]:
        refreshed: dict[str, float] = {}
        if self.reward_refresh is not None and self.reward_refresh.due(self.iteration):
            refreshed = self.reward_refresh.refresh(self.meter)
        record: dict[str, Any] = dict(refreshed)
        if refreshed and self.annotator is not None and self.settings.stale_pairs == "evict":
            record["preference/stale_evicted"] = self.pairs.remove_scored_before(
                self.annotator.version
            )
        fresh: Sample | None = None
        fresh_keys = np.zeros(0, dtype=np.int64)
        annotated = self.annotation_due()
        if annotated:
            self._round_prompts = {}
            fresh_rollouts, generated = self.generate_rollouts()
            record.update(generated)
            assert self.pair_maker is not None
            problems = self._problems(fresh_rollouts)
            with self.meter.time("scoring"):
                made, annotation = self.pair_maker.make(
                    fresh_rollouts, problems, self.meter, limit=self._pairs_left()
                )
            record.update(annotation)
            if made is not None:
                row_keys = self.pairs.insert(made)
                fresh_keys = row_keys[0::2]
                fresh = Sample.from_batch(made, current_version=self.learner.version, keys=row_keys)
        steps: list[dict[str, float]] = []
        with self.meter.time("training"):
            for index in range(self.settings.steps_per_iteration):
                again = index == 0 or self.settings.replay == "none"
                sample = self._batch(fresh if again else None, fresh_keys)
                if sample is None:
                    break
                step, wrongness = preference_step(
                    self.learner,
                    sample,
                    self.pair_loss,
                    correction=self.settings.correction,
                    is_cap=self.settings.is_cap,
                )
                self.pairs.update(sample.keys[0::2], wrongness)
                trained_fresh = 0 if fresh is None or not again else len(fresh)
                step["train/replayed_fraction"] = 1.0 - trained_fresh / len(sample)
                steps.append(step)
                self.meter.add_training_step(len(sample), step)
        self._publish()
        self.pairs.set_version(self.learner.version)
        self.iteration += 1
        record.update(summarise_steps(steps))
        record.update(self.pairs.metrics(self.learner.version))
        record["preference/annotated"] = float(annotated)
        if self.annotator is not None:
            record["compute/annotation_cost"] = self.annotator.counts.cost
        return record

    def _pairs_left(self) -> int | None:
        """Pairs the annotation budget still pays for (None: no budget)."""
        p = self.settings
        if not p.annotation_budget or self.annotator is None:
            return None
        if p.annotation_cost == 0:
            return None
        return int((p.annotation_budget - self.annotator.counts.cost) // p.annotation_cost)

    def _prompt_indices(self) -> np.ndarray:
        indices = super()._prompt_indices()
        first = self.next_group  # the round's groups are numbered from here, in this order
        self._round_prompts.update({first + i: int(p) for i, p in enumerate(indices)})
        return indices

    def _problems(self, batch: Any) -> list[Any]:
        """Each fresh row's problem, by the prompt its group was drawn for."""
        return [self.task.train[self._round_prompts[int(g)]] for g in batch.group_ids]

    def _batch(self, fresh: Sample | None, fresh_keys: np.ndarray) -> Sample | None:
        """Fresh pairs first, the rest of `batch_pairs` from the table."""
        have = 0 if fresh is None else len(fresh) // 2
        replayed = self.pairs.draw(self.settings.batch_pairs - have, exclude=fresh_keys)
        parts = [s for s in (fresh, replayed) if s is not None]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else Sample.concat(parts)

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> dict[str, Any]:
        state = super()._state()
        if self.annotator is not None:
            state["annotations"] = dataclasses.asdict(self.annotator.counts)
        state["file_pairs"] = self.file_pairs
        return state

    def _save_replay(self, directory: Path) -> None:
        super()._save_replay(directory)
        self.pairs.save(directory / PAIRS_DIR)

    def _load_replay(self, directory: Path, state: dict[str, Any]) -> None:
        super()._load_replay(directory, state)
        self.pairs.load(directory / PAIRS_DIR)
        if self.annotator is not None:
            counts = state.get("annotations")
            if not isinstance(counts, dict):
                raise ValueError("preference.annotator is set, but the checkpoint has no counts")
            self.annotator.counts = AnnotationCounts(**counts)

    def close(self) -> None:
        super().close()
        if self.annotator is not None:
            self.annotator.close()
