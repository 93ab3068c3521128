"""reasoning-gym procedural datasets as tasks (offline, seeded).

reasoning-gym generates problems from a seed. A hash of each prompt puts it on the train or the
eval side of the problem space (`eval_fraction` of it is eval, see `tasks.split`); the train
split is the first `train_size` problems of the `seed` stream on the train side, the eval split
the first `eval_size` of the `eval_seed` stream on the eval side. Both follow the generator's
distribution and never share a prompt, whatever the seeds. Scoring is the dataset's own
`score_answer`. `prompt_template` formats the model-facing prompt from the entry's `question`
and metadata fields, so a tiny character-level model can see `98+93-77=` instead of a sentence.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from llm_replay.near_miss import did_you_mean
from llm_replay.tasks.base import Problem, SplitTask, TaskError
from llm_replay.tasks.split import fill_split


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
        eval_fraction: float = 0.1,
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
        registered = getattr(getattr(reasoning_gym, "factory", None), "DATASETS", None)
        if isinstance(registered, dict) and dataset not in registered:
            raise TaskError(
                f"task.dataset = {dataset!r}: no reasoning-gym dataset of that name"
                + did_you_mean(dataset, registered)
            )
        try:
            self._scorer = reasoning_gym.create_dataset(dataset, size=1, seed=seed, **params)
            streams = {
                name: reasoning_gym.create_dataset(dataset, size=2**31 - 1, seed=s, **params)
                for name, s in (("train", seed), ("eval", eval_seed))
            }
            first = streams["eval"][0]
        except Exception as error:
            raise TaskError(f"reasoning-gym dataset {dataset!r} with {params}: {error}") from None
        metadata = first.get("metadata", {})
        unknown = fields - {"question", "answer"} - set(metadata)
        if unknown:
            raise TaskError(
                f"prompt_template = {prompt_template!r}: unknown field(s) {sorted(unknown)}; "
                f"available: question, {', '.join(sorted(metadata))}"
            )
        splits = {}
        reports = []
        for name, size in (("train", train_size), ("eval", eval_size)):
            entries = streams[name]

            def draw(i: int, entries: Any = entries) -> Problem:
                return self._problem(entries[i])

            problems, report = fill_split(
                draw,
                size=size,
                eval_side=name == "eval",
                eval_share=eval_fraction,
                split=name,
            )
            if not problems:
                raise TaskError(
                    f"{dataset}: no {name} problems in {report.draws} draws "
                    f"(eval_fraction = {eval_fraction}); the problem space is too small to split"
                )
            splits[name] = problems
            reports.append(report)
        self._train, self._eval = splits["train"], splits["eval"]
        self.split_reports = tuple(reports)

    def _problem(self, entry: Mapping[str, Any]) -> Problem:
        metadata = dict(entry.get("metadata", {}))
        prompt = self._template.format(question=entry["question"], **metadata)
        answer = str(entry["answer"])
        if self._strip:
            prompt, answer = prompt.replace(" ", ""), answer.replace(" ", "")
        return Problem(prompt, answer, {"entry": dict(entry)})

    def score(self, completion: str, problem: Problem) -> float:
        return float(self._scorer.score_answer(completion.strip(), problem.metadata["entry"]))
