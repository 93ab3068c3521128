"""reasoning-gym procedural datasets as tasks (offline, seeded).

reasoning-gym generates problems from a seed; we draw the eval split from `eval_seed`, the train
split from `seed`, and drop train problems whose prompt is in the eval split (seeds 1 and 2 give
shifted copies of each other, so this filter matters). Scoring is the dataset's own
`score_answer`. `prompt_template` formats the model-facing prompt from the entry's `question`
and metadata fields, so a tiny character-level model can see `98+93-77=` instead of a sentence.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from llm_replay.tasks.base import Problem, SplitTask, TaskError, disjoint_train


class ReasoningGymTask(SplitTask):
    """A reasoning-gym dataset, e.g. `chain_sum`, `basic_arithmetic`, `leg_counting`."""

    def __init__(
        self,
        dataset: str,
        *,
        params: Mapping[str, Any] | None = None,
        train_size: int = 20_000,
        eval_size: int = 500,
        seed: int = 1,
        eval_seed: int = 2,
        prompt_template: str = "{question}",
        strip_spaces: bool = False,
        correct_threshold: float = 1.0,
    ) -> None:
        try:
            import reasoning_gym
        except ImportError as error:  # pragma: no cover - depends on the install
            raise TaskError(
                "reasoning-gym is not installed: pip install 'llm-replay[train]'"
            ) from error
        if train_size < 1 or eval_size < 1:
            raise TaskError(f"train_size = {train_size}, eval_size = {eval_size}: must be >= 1")
        fields = {name for _, name, _, _ in string.Formatter().parse(prompt_template) if name}
        self.name = dataset
        self.correct_threshold = float(correct_threshold)
        self._template = prompt_template
        self._strip = strip_spaces
        params = dict(params or {})
        try:
            self._scorer = reasoning_gym.create_dataset(dataset, size=1, seed=seed, **params)
            eval_entries = list(
                reasoning_gym.create_dataset(dataset, size=eval_size, seed=eval_seed, **params)
            )
            train_entries = list(
                reasoning_gym.create_dataset(dataset, size=train_size, seed=seed, **params)
            )
        except Exception as error:
            raise TaskError(f"reasoning-gym dataset {dataset!r} with {params}: {error}") from None
        unknown = fields - {"question", "answer"} - set(eval_entries[0].get("metadata", {}))
        if unknown:
            raise TaskError(
                f"prompt_template = {prompt_template!r}: unknown field(s) {sorted(unknown)}; "
                f"available: question, {', '.join(sorted(eval_entries[0].get('metadata', {})))}"
            )
        self._eval = tuple(self._problem(e) for e in eval_entries)
        self._train = disjoint_train([self._problem(e) for e in train_entries], self._eval)
        if not self._train:
            raise TaskError(f"{dataset}: every train problem also occurs in the eval split")

    def _problem(self, entry: Mapping[str, Any]) -> Problem:
        metadata = dict(entry.get("metadata", {}))
        prompt = self._template.format(question=entry["question"], **metadata)
        if self._strip:
            prompt = prompt.replace(" ", "")
        return Problem(prompt, str(entry["answer"]), {"entry": dict(entry)})

    def score(self, completion: str, problem: Problem) -> float:
        return float(self._scorer.score_answer(completion.strip(), problem.metadata["entry"]))
