"""Hash-partitioned splits: disjoint, same distribution on both sides, short splits reported."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import reasoning_gym
from hypothesis import given
from hypothesis import strategies as st

from llm_replay.config import ConfigError, config_from_dict
from llm_replay.runtime.task_builder import build_task
from llm_replay.tasks import DatasetTask, Problem, ReasoningGymTask, TaskError
from llm_replay.tasks.builtin import CHAIN_SUM, chain_sum_task
from llm_replay.tasks.split import fill_split, hash_fraction, in_eval_side, partition_rows


def two_one_digit_terms(prompt: str) -> bool:
    terms = prompt.rstrip("=").replace("-", "+").split("+")
    return len(terms) == 2 and all(len(t) == 1 for t in terms)


def test_both_chain_sum_splits_follow_the_generator() -> None:
    """The bug this module fixes: filtering train against eval had left 49% of eval problems with
    two 1-digit operands against 0.1% of train. Both sides must now show the generator's share."""
    task = chain_sum_task(train_size=4000, eval_size=1000)
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.eval}
    raw = reasoning_gym.create_dataset("chain_sum", size=20_000, seed=5, **CHAIN_SUM["params"])
    generator = np.mean([len(e["metadata"]["expression"].replace(" ", "")) == 3 for e in raw])
    assert 0.2 < generator < 0.4
    for split, n in ((task.train, 4000), (task.eval, 1000)):
        share = np.mean([two_one_digit_terms(p.prompt) for p in split])
        assert abs(share - generator) < 4 * np.sqrt(generator * (1 - generator) / n)


def test_splits_are_stable_across_train_size_and_disjoint_across_seeds() -> None:
    small = chain_sum_task(train_size=500, eval_size=200)
    large = chain_sum_task(train_size=3000, eval_size=200)
    assert [p.prompt for p in small.eval] == [p.prompt for p in large.eval]
    spec = {k: v for k, v in CHAIN_SUM.items() if k not in ("dataset", "seed", "eval_seed")}
    other = ReasoningGymTask(
        "chain_sum", train_size=2000, eval_size=50, seed=7, eval_seed=1, **spec
    )
    assert not {p.prompt for p in other.train} & {p.prompt for p in large.eval}


def test_hash_fraction_is_uniform_and_salted() -> None:
    values = np.array([hash_fraction(f"prompt {i}") for i in range(20_000)])
    assert abs(np.mean(values < 0.1) - 0.1) < 0.01
    assert abs(values.mean() - 0.5) < 0.01
    assert hash_fraction("x") == hash_fraction("x")
    assert hash_fraction("x", salt="1") != hash_fraction("x", salt="2")


@given(st.lists(st.sampled_from([f"p{i}" for i in range(30)]), max_size=200))
def test_every_copy_of_a_prompt_lands_on_one_side(prompts: list[str]) -> None:
    rows = [Problem(p, "a") for p in prompts]
    train, held_out = partition_rows(rows, 0.3, salt="0")
    assert len(train) + len(held_out) == len(rows)
    assert not {p.prompt for p in train} & {p.prompt for p in held_out}
    assert all(in_eval_side(p.prompt, 0.3, "0") for p in held_out)


def test_a_small_problem_space_repeats_and_says_so() -> None:
    space = [Problem(f"q{i}", "a") for i in range(40)]
    rng = np.random.default_rng(0)
    problems, report = fill_split(
        lambda _: space[int(rng.integers(40))],
        size=500,
        eval_side=False,
        eval_share=0.5,
        split="train",
    )
    assert len(problems) == 500 and report.rows == 500
    assert report.unique <= 40 and report.repeats
    message = report.warning()
    assert message is not None and "only" in message and f"{report.unique} unique" in message


def test_a_split_the_generator_cannot_fill_is_reported_short() -> None:
    eval_prompts = [f"q{i}" for i in range(2000) if in_eval_side(f"q{i}", 0.1)][:3]
    problems, report = fill_split(
        lambda i: Problem(eval_prompts[i % 3], "a"),
        size=10,
        eval_side=False,
        eval_share=0.1,
        split="train",
        max_draws=100,
    )
    assert problems == () and report.draws == 100
    message = report.warning()
    assert message is not None and "0 of 10 requested" in message


def test_a_tiny_space_warns_in_the_run_log(caplog: pytest.LogCaptureFixture) -> None:
    config = config_from_dict(
        {
            "task": {
                "dataset": "chain_sum",
                "params": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
                "train_size": 2000,
                "eval_size": 20,
            }
        }
    )
    with caplog.at_level(logging.WARNING, logger="llm_replay.runtime.task_builder"):
        task = build_task(config)
    assert len(task.train) == 2000
    assert any(
        "train split" in r.getMessage() and "unique" in r.getMessage() for r in caplog.records
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llm_replay.runtime.task_builder"):
        assert build_task(config, quiet=True).train == task.train  # a reader, not a run
    assert not caplog.records


def test_bad_eval_fraction_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"eval_fraction = 1\.5"):
        config_from_dict({"task": {"eval_fraction": 1.5}})
    with pytest.raises(TaskError, match="eval_fraction = 0"):
        ReasoningGymTask("chain_sum", train_size=10, eval_size=5, eval_fraction=0.0)
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "only", "answer": "1"}) + "\n")
    with pytest.raises(TaskError, match="no row hashed into the eval share"):
        DatasetTask(path, eval_fraction=0.01)
