"""A mixture of tasks: one split per member, seeded draws by weight, tagged problems, member
errors named at build, per-member evaluation, and tagged rollouts through a sync run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import load_config
from llm_replay.evaluation import accuracy_by_task, distinct_problems
from llm_replay.runtime import SyncTrainer
from llm_replay.runtime.task_builder import build_task
from llm_replay.tasks import TASK_TAG, MixtureTask, Problem, TaskError, task_tag
from llm_replay.tasks.mixture import weighted_draws, weighted_round_robin
from tests.conftest import tiny_config

MEMBERS = ("gcd", "products", "binary_alternation", "lcm")


def small_mixture(*extra: str) -> MixtureTask:
    config = load_config("mixture", ["task.train_size=800", "task.eval_size=40", *extra])
    task = build_task(config, quiet=True)
    assert isinstance(task, MixtureTask)
    return task


def test_seeded_draws_follow_the_weights() -> None:
    weights = [1.0, 2.0, 3.0, 4.0]
    draws = weighted_draws(weights, 20_000, seed=1)
    shares = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(shares, np.array(weights) / 10, atol=0.015)  # ~5 std
    assert np.array_equal(draws, weighted_draws(weights, 20_000, seed=1))
    assert not np.array_equal(draws, weighted_draws(weights, 20_000, seed=2))


def test_round_robin_keeps_every_prefix_within_one_of_its_share() -> None:
    weights = np.array([3.0, 1.0, 1.0])
    slots = weighted_round_robin(weights, 50)
    for n in range(1, 51):
        counts = np.bincount(slots[:n], minlength=3)
        assert np.all(np.abs(counts - n * weights / weights.sum()) <= 1.0)
    assert list(weighted_round_robin([1, 1, 1, 1], 8)) == [0, 1, 2, 3, 0, 1, 2, 3]


def test_each_member_has_its_own_split_and_the_splits_never_share_a_prompt() -> None:
    task = small_mixture()
    assert set(task.tasks) == set(MEMBERS)
    for split in (task.train, task.eval):
        assert {task_tag(p) for p in split} == set(MEMBERS)
    for name, member in task.tasks.items():
        own_train = {p.prompt for p in member.train}
        assert {p.prompt for p in task.train if task_tag(p) == name} <= own_train
        assert {p.prompt for p in task.eval if task_tag(p) == name} <= {
            p.prompt for p in member.eval
        }
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.eval}
    assert Counter(task_tag(p) for p in task.eval) == dict.fromkeys(MEMBERS, 10)
    assert {r.split for r in task.split_reports} == {
        f"{m} {s}" for m in MEMBERS for s in ("train", "eval")
    }


def test_training_draws_are_seeded_and_by_weight() -> None:
    weights = "task.members={chain_sum: {weight: 3}, gcd: {weight: 1}}"
    task = small_mixture(weights, "task.train_size=4000", "generation.max_new_tokens=8")
    shares = Counter(task_tag(p) for p in task.train)
    assert abs(shares["chain_sum"] / 4000 - 0.75) < 0.035  # ~5 std of a binomial share
    assert task.weights == {"chain_sum": 0.75, "gcd": 0.25}
    again = small_mixture(weights, "task.train_size=4000", "generation.max_new_tokens=8")
    assert [p.prompt for p in again.train] == [p.prompt for p in task.train]
    other = small_mixture(
        weights, "task.train_size=4000", "task.seed=5", "generation.max_new_tokens=8"
    )
    assert [p.prompt for p in other.train] != [p.prompt for p in task.train]


def test_score_is_the_members_own_and_an_untagged_problem_is_refused() -> None:
    task = small_mixture()
    for problem in task.eval[:8]:
        assert task.score(problem.answer, problem) == 1.0
        assert task.score("x", problem) == 0.0
    with pytest.raises(TaskError, match="not a member of this mixture"):
        task.score("1", Problem("1+0=", "1", {TASK_TAG: "spell"}))


def test_a_template_field_the_dataset_lacks_is_named_when_the_task_is_built() -> None:
    config = load_config("mixture", ["task.members.gcd.prompt_template='{expression}='"])
    with pytest.raises(
        TaskError, match=r"task\.members\.gcd\.prompt_template = '\{expression\}=': unknown field"
    ):
        build_task(config)
    config = load_config("mixture", ["task.members={x: {dataset: gcdd}}"])
    with pytest.raises(TaskError, match=r"task\.members\.x\.dataset = 'gcdd'.*did you mean 'gcd'"):
        build_task(config)


def test_accuracy_by_task_reports_each_tagged_task_and_nothing_for_untagged() -> None:
    problems = [Problem(str(i), "", {TASK_TAG: t}) for i, t in enumerate("aabbb")]
    correct = [True, False, True, True, False]
    assert accuracy_by_task(problems, correct) == {
        "eval/a/accuracy": 0.5,
        "eval/b/accuracy": pytest.approx(2 / 3),
    }
    assert accuracy_by_task([Problem("p", "a")], [True]) == {}


def test_a_sync_run_of_the_preset_tags_rollouts_and_evaluates_each_member(tmp_path: Path) -> None:
    """Accuracy, pass@k and entropy per member beside the overall readings; rollouts tagged."""
    config = tiny_config("mixture", tmp_path / "run", "train.iterations=2")
    trainer = SyncTrainer(config)
    trainer.run()
    for record in trainer.evals:
        keys = {f"eval/{m}/accuracy" for m in MEMBERS}
        assert keys <= set(record) and "eval/accuracy" in record
        assert record["eval/size"] == 16  # four of each member: the eval split is dealt in turn
        prompts = [p.prompt for p in trainer.task.eval[:16]]
        assert record["eval/distinct"] == pytest.approx(distinct_problems(trainer.task.eval[:16]))
        assert 1.0 <= record["eval/distinct"] <= len(set(prompts))
        overall = np.mean([record[k] for k in keys])
        assert record["eval/accuracy"] == pytest.approx(overall)
        # pass@k and entropy per member on the pass subset (eval.pass_size=4: one problem each)
        for k in (1, 2):
            members = [record[f"eval/{m}/pass@{k}"] for m in MEMBERS]
            assert record[f"eval/pass@{k}"] == pytest.approx(np.mean(members))
        entropies = [record[f"eval/{m}/entropy"] for m in MEMBERS]
        assert all(np.isfinite(entropies)) and min(entropies) >= 0
        assert min(entropies) <= record["eval/entropy"] + 1e-6 <= max(entropies) + 2e-6
    fresh = SyncTrainer(config)  # the finished run's scorer is closed
    batch, _ = fresh.generate_rollouts()
    member_of = {p.prompt: task_tag(p) for p in fresh.task.train}
    prompts = fresh.tokenizer.batch_decode([r.prompt_ids for r in batch], skip_special_tokens=True)
    assert list(batch.tasks) == [member_of[p] for p in prompts]
    assert set(batch.tasks) <= set(MEMBERS)
