"""JSONL / Parquet datasets of `prompt` + `answer` rows (GSM8K / MATH style), scored by math-verify.

Rows are validated on load; a bad row is reported with its file and line (JSONL) or row number
(Parquet) and nothing is half-loaded. The eval split is a separate file or a seeded fraction of
the train file; prompts never occur in both.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from llm_replay.tasks.base import Problem, SplitTask, TaskError, disjoint_train


def read_rows(
    path: str | Path, prompt_field: str = "prompt", answer_field: str = "answer"
) -> list[Problem]:
    """Problems from a `.jsonl` or `.parquet` file; errors name the file and the line/row."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such dataset file")
    if path.suffix == ".jsonl":
        records = []
        with path.open("rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise TaskError(
                        f"{path}:{line_no}: not UTF-8 text (byte {error.start} of the line)"
                    ) from None
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise TaskError(f"{path}:{line_no}: not valid JSON ({error.msg})") from None
                records.append((f"{path}:{line_no}", record))
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as error:
            raise TaskError(f"{path}: unreadable Parquet file ({error})") from None
        records = [(f"{path} row {i}", r) for i, r in enumerate(table.to_pylist())]
    else:
        raise TaskError(
            f"{path}: unsupported dataset format {path.suffix!r} (use .jsonl or .parquet)"
        )
    problems = []
    for where, record in records:
        if not isinstance(record, dict):
            raise TaskError(
                f"{where}: expected an object with {prompt_field!r} and {answer_field!r}"
            )
        for key in (prompt_field, answer_field):
            value = record.get(key)
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and key == answer_field
            ):
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                raise TaskError(f"{where}: field {key!r} = {value!r}: must be a non-empty string")
        extra = {k: v for k, v in record.items() if k not in (prompt_field, answer_field)}
        problems.append(Problem(record[prompt_field], str(record[answer_field]), extra))
    if not problems:
        raise TaskError(f"{path}: no rows")
    return problems


def math_verify_reward(completion: str, answer: str) -> float:
    """1.0 if math-verify finds the completion's answer equivalent to the reference, else 0.0.

    math-verify's own signal-based timeouts only work on the main thread; the scorer that calls
    this enforces its own time limit, so they are switched off here.
    """
    from math_verify import parse, verify

    gold = parse(answer, parsing_timeout=None)
    guess = parse(completion, parsing_timeout=None)
    if not gold or not guess:
        return 0.0
    return 1.0 if verify(gold, guess, timeout_seconds=None) else 0.0


class DatasetTask(SplitTask):
    """Prompt/answer rows from files; reward from math-verify."""

    def __init__(
        self,
        path: str | Path,
        *,
        eval_path: str | Path | None = None,
        eval_fraction: float = 0.1,
        seed: int = 0,
        prompt_field: str = "prompt",
        answer_field: str = "answer",
        correct_threshold: float = 1.0,
    ) -> None:
        self.name = Path(path).stem
        self.correct_threshold = float(correct_threshold)
        rows = read_rows(path, prompt_field, answer_field)
        if eval_path is not None:
            eval_rows = read_rows(eval_path, prompt_field, answer_field)
        else:
            if not 0.0 < eval_fraction < 1.0:
                raise TaskError(f"eval_fraction = {eval_fraction!r}: must be in (0, 1)")
            order = list(range(len(rows)))
            random.Random(seed).shuffle(order)
            n_eval = max(1, round(eval_fraction * len(rows)))
            eval_rows = [rows[i] for i in sorted(order[:n_eval])]
            rows = [rows[i] for i in sorted(order[n_eval:])]
        self._eval = tuple(eval_rows)
        self._train = disjoint_train(rows, self._eval)
        if not self._train:
            raise TaskError(f"{path}: no train rows left after removing eval prompts")

    def score(self, completion: str, problem: Problem) -> float:
        return math_verify_reward(completion, problem.answer)
