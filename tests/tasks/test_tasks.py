"""Tasks: disjoint splits, prompt templates, dataset rows with line numbers, safe scoring."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from llm_replay.tasks import (
    DatasetTask,
    Problem,
    ReasoningGymTask,
    SafeScorer,
    TaskError,
    math_verify_reward,
)
from llm_replay.tasks.builtin import BUILTIN_TASKS, builtin_task, chain_sum_task


def test_chain_sum_splits_are_disjoint_and_compact() -> None:
    task = chain_sum_task(train_size=3000, eval_size=300)
    train_prompts = {p.prompt for p in task.train}
    assert not train_prompts & {p.prompt for p in task.eval}
    assert len(task.train) == 3000 and len(task.eval) == 300
    assert all(" " not in p.prompt and p.prompt.endswith("=") for p in task.eval)
    problem = task.eval[0]
    assert task.score(problem.answer, problem) == 1.0
    assert task.score(problem.answer + "1", problem) < 1.0
    assert task.score("", problem) == 0.0


def test_reasoning_gym_errors_name_the_problem() -> None:
    with pytest.raises(TaskError, match="unknown field"):
        ReasoningGymTask("chain_sum", train_size=10, eval_size=5, prompt_template="{nope}=")
    with pytest.raises(TaskError, match="no_such_dataset"):
        ReasoningGymTask("no_such_dataset", train_size=10, eval_size=5)


def test_other_reasoning_gym_datasets_load() -> None:
    for name in ("basic_arithmetic", "leg_counting"):
        task = ReasoningGymTask(name, train_size=50, eval_size=10)
        assert task.train and task.eval
        assert task.score(task.eval[0].answer, task.eval[0]) == 1.0


def test_strip_spaces_strips_the_reference_answer_too() -> None:
    """countdown's references read `8 + 7 - 4`: the warm start's targets must be the answers a
    prompt without spaces asks for, or a completion spends its tokens on spaces."""
    spec = dict(BUILTIN_TASKS["countdown"])
    spec.pop("dataset")
    task = ReasoningGymTask("countdown", train_size=200, eval_size=20, **spec)
    spaced = ReasoningGymTask("countdown", **{**spec, "strip_spaces": False}, train_size=200)
    assert all(" " not in p.answer for p in task.train)
    assert any(" " in p.answer for p in spaced.train)
    problem = task.eval[0]
    entry = problem.metadata["entry"]["metadata"]
    numbers, target = entry["numbers"], entry["target"]
    assert problem.prompt == f"[{','.join(map(str, numbers))}]>{target}="
    assert task.score(problem.answer, problem) == 1.0
    expressions = (
        f"{a}{x}{b}{y}{c}"
        for a, b, c in itertools.permutations(numbers)
        for x, y in itertools.product("+-*", repeat=2)
    )
    right = [e for e in expressions if eval(e) == target and e != problem.answer]
    assert right and task.score(right[0], problem) == 1.0  # several right answers score
    assert task.score(f"{target}", problem) < 1.0  # the target alone uses no number


def test_number_sequence_asks_for_the_next_term_of_the_shown_terms() -> None:
    """number_sequence's prompt is the question itself, `5,2,1,0,?`: the terms before the answer
    and a question mark, never the answer (the metadata's `sequence` holds it)."""
    task = builtin_task("number_sequence", train_size=200, eval_size=20)
    for problem in task.eval:
        sequence = problem.metadata["entry"]["metadata"]["sequence"]
        assert problem.prompt == ",".join(map(str, sequence[:-1])) + ",?"
        assert problem.answer == str(sequence[-1])
        assert 4 <= len(sequence) - 1 <= 5
        assert task.score(problem.answer, problem) == 1.0
        assert task.score(str(sequence[-1] + 1), problem) < 1.0


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_dataset_with_math_verify(tmp_path: Path) -> None:
    rows = [{"prompt": f"What is {i}/2?", "answer": f"\\frac{{{i}}}{{2}}"} for i in range(1, 21)]
    task = DatasetTask(write_jsonl(tmp_path / "d.jsonl", rows), eval_fraction=0.25, seed=3)
    assert task.eval and len(task.eval) + len(task.train) == 20
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.eval}
    problem = next(p for p in task.eval)
    value = int(problem.prompt.split()[2].split("/")[0]) / 2
    assert task.score(f"The answer is {value}", problem) == 1.0
    assert task.score("The answer is 1234", problem) == 0.0


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ("{not json", r"d\.jsonl:3: not valid JSON"),
        ({"prompt": "x"}, r"d\.jsonl:3: field 'answer' = None"),
        ({"prompt": "", "answer": "1"}, r"d\.jsonl:3: field 'prompt' = ''"),
        ([1, 2], r"d\.jsonl:3: expected an object"),
    ],
)
def test_bad_jsonl_row_is_reported_with_its_line(tmp_path: Path, row: object, match: str) -> None:
    good = {"prompt": "1+1", "answer": "2"}
    path = write_jsonl(tmp_path / "d.jsonl", [good, good, row])
    with pytest.raises(TaskError, match=match):
        DatasetTask(path)


def test_parquet_dataset_and_bad_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"question": [f"{i}+1" for i in range(10)], "solution": [str(i + 1) for i in range(10)]}
    )
    pq.write_table(table, tmp_path / "d.parquet")
    task = DatasetTask(tmp_path / "d.parquet", prompt_field="question", answer_field="solution")
    assert len(task.train) + len(task.eval) == 10
    bad = pa.table({"prompt": ["a", None], "answer": ["1", "2"]})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(TaskError, match=r"bad\.parquet row 1: field 'prompt'"):
        DatasetTask(tmp_path / "bad.parquet")


def test_missing_and_unsupported_files(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no such dataset file"):
        DatasetTask(tmp_path / "missing.jsonl")
    (tmp_path / "d.csv").write_text("prompt,answer\n")
    with pytest.raises(TaskError, match="unsupported dataset format"):
        DatasetTask(tmp_path / "d.csv")


def test_math_verify_reward_equivalences() -> None:
    assert math_verify_reward("so x = 0.5", "$\\frac{1}{2}$") == 1.0
    assert math_verify_reward("no number here", "3") == 0.0


class FlakyTask:
    """Scores '1' as 1.0, raises on 'boom', hangs on 'hang'."""

    name = "flaky"
    correct_threshold = 1.0
    train = eval = (Problem("q", "1"),)

    def __init__(self) -> None:
        self.release = threading.Event()

    def score(self, completion: str, problem: Problem) -> float:
        if completion == "boom":
            raise RuntimeError("reward crashed")
        if completion == "hang":
            self.release.wait(30)
        if completion == "nan":
            return float("nan")
        return 1.0 if completion == problem.answer else 0.0


def test_crashing_and_hanging_rewards_are_survived_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    task = FlakyTask()
    scorer = SafeScorer(task, timeout_s=2.0, failure_reward=-1.0, workers=2)
    problems = [task.train[0]] * 5
    try:
        rewards = scorer.score(["1", "boom", "hang", "0", "nan"], problems)
        assert rewards.tolist() == [1.0, -1.0, -1.0, 0.0, -1.0]
        assert (scorer.counts.errors, scorer.counts.timeouts, scorer.counts.calls) == (2, 1, 5)
        assert "reward crashed" in caplog.text
        # the hung thread is abandoned; scoring goes on with a fresh pool
        assert scorer.score(["1", "1"], problems[:2]).tolist() == [1.0, 1.0]
    finally:
        task.release.set()
        scorer.close()


def test_binary_reward_turns_partial_credit_into_exact_match() -> None:
    from llm_replay.config import ConfigError, load_config
    from llm_replay.runtime.task_builder import build_scorer, build_task

    overrides = [
        "task.dataset=spell_backward",
        "task.params={min_word_len: 3, max_word_len: 5}",
        "task.prompt_template='{word}<'",
        "task.train_size=50",
        "task.eval_size=10",
    ]
    config = load_config("on_policy", [*overrides, "task.reward=binary"])
    task = build_task(config)
    problem = task.eval[0]
    near_miss = problem.answer[:-1] + ("a" if problem.answer[-1] != "a" else "b")
    partial = build_scorer(load_config("on_policy", overrides), task)
    binary = build_scorer(config, task)
    try:
        graded = partial.score([problem.answer, near_miss, ""], [problem] * 3)
        assert graded[0] == 1.0 and 0.0 < graded[1] < 1.0  # spell_backward gives partial credit
        assert binary.score([problem.answer, near_miss, ""], [problem] * 3).tolist() == [1, 0, 0]
    finally:
        partial.close()
        binary.close()
    with pytest.raises(ConfigError, match="reward = 'exact'"):
        load_config("on_policy", ["task.reward=exact"])
