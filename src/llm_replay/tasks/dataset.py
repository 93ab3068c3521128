"""JSONL / Parquet datasets of `prompt` + `answer` rows (GSM8K / MATH style), scored by math-verify.

Rows are validated on load; a bad row is reported with its file and line (JSONL) or row number
(Parquet) and nothing is half-loaded. The eval split is a separate file (train rows with an eval
prompt are dropped) or the rows whose prompt hashes, salted by `seed`, into the `eval_fraction`
share of the space (`tasks.split`): every copy of a prompt lands on the same side.
"""

from __future__ import annotations

import json
from pathlib import Path

from llm_replay.tasks.base import Problem, SplitTask, TaskError, disjoint_train
from llm_replay.tasks.split import partition_rows


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
            train_rows, held_out = partition_rows(rows, eval_fraction, salt=str(seed))
            if not held_out:
                raise TaskError(
                    f"{path}: no row hashed into the eval share (eval_fraction = "
                    f"{eval_fraction}, {len(rows)} rows): raise eval_fraction or give eval_path"
                )
            rows, eval_rows = list(train_rows), list(held_out)
        self._eval = tuple(eval_rows)
        self._train = disjoint_train(rows, self._eval) if eval_path is not None else tuple(rows)
        if not self._train:
            raise TaskError(f"{path}: no train rows left after removing eval prompts")

    def score(self, completion: str, problem: Problem) -> float:
        return math_verify_reward(completion, problem.answer)
