"""Re-scoring stored rollouts: new rewards and advantages all or nothing, priorities follow,
durable tables journal it, and the CLI scores with a config's task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_replay.buffer import Prioritized, ReplayTable
from llm_replay.cli import main
from llm_replay.config import load_config
from llm_replay.data.batch import RolloutBatch
from llm_replay.models import build_char_tokenizer, encode_prompts
from llm_replay.rescore import rescore_table
from llm_replay.runtime.task_builder import build_task
from llm_replay.tasks.reward_model import RewardModel
from tests.conftest import make_batch


def test_new_rewards_and_group_advantages_by_hand() -> None:
    table = ReplayTable(32)
    batch = make_batch(np.random.default_rng(0), 8, group_size=4)
    keys = table.insert(batch)
    new = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    report = rescore_table(table, lambda s: new[np.searchsorted(keys, s.keys)], estimator="dr_grpo")
    sample, _ = table.get(keys)
    np.testing.assert_array_equal(sample.rewards, new)
    np.testing.assert_allclose(sample.advantages, new - np.repeat([0.25, 0.5], 4))
    np.testing.assert_array_equal(sample.correct, new.astype(np.int8))
    assert report.rollouts == 8 and report.groups == 2 and report.partial_groups == 0
    assert report.mean_reward_after == pytest.approx(0.375)
    table.remove(keys[:1])  # a group with an evicted member: advantages over who is left
    assert rescore_table(table, lambda s: np.ones(len(s))).partial_groups == 1


def test_a_failing_reward_fn_leaves_the_table_untouched() -> None:
    table = ReplayTable(4096)
    table.insert(make_batch(np.random.default_rng(0), 3000))
    before, _ = table.state()
    arrays_before = table.state()[1]
    calls = []

    def flaky(sample: object) -> np.ndarray:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("verifier down")
        return np.ones(len(sample))  # type: ignore[arg-type]

    with pytest.raises(RuntimeError, match="verifier down"):
        rescore_table(table, flaky, chunk=1024)
    after, arrays_after = table.state()
    assert before == after
    for name in arrays_before:
        np.testing.assert_array_equal(arrays_before[name], arrays_after[name])
    with pytest.raises(ValueError, match="one finite reward per rollout"):
        rescore_table(table, lambda s: np.ones(3))


def test_prioritized_draws_follow_the_new_advantages_and_durable_tables_keep_them(
    tmp_path: object,
) -> None:
    directory = tmp_path / "t"  # type: ignore[operator]
    table = ReplayTable.open(
        directory, max_rollouts=64, sampler=Prioritized(alpha=1.0, epsilon=1e-9)
    )
    keys = table.insert(make_batch(np.random.default_rng(1), 8, group_size=8))
    rewards = np.array([1.0, 0, 0, 0, 0, 0, 0, 0])
    rescore_table(table, lambda s: rewards[np.searchsorted(keys, s.keys)], estimator="dr_grpo")
    drawn = table.sample(2000).keys
    share = float((drawn == keys[0]).mean())  # |A| = 7/8 against 1/8 for each of seven others
    assert share == pytest.approx(0.5, abs=0.05)
    reopened = ReplayTable.open(
        directory, max_rollouts=64, sampler=Prioritized(alpha=1.0, epsilon=1e-9)
    )
    np.testing.assert_array_equal(reopened.get(keys)[0].rewards, rewards)


def answered_rollouts(
    reward_versions: list[int] | None = None,
) -> tuple[list[Any], list[str], RolloutBatch]:
    """Four train problems of the default task answered right, wrong, right, wrong (two groups),
    stored with reward 0: (problems, answers, batch)."""
    task = build_task(load_config(None, ["task.train_size=20", "task.eval_size=5"]))
    tok = build_char_tokenizer()
    problems = list(task.train[:4])
    prompts = encode_prompts(tok, [p.prompt for p in problems], "off")
    answers = [p.answer if i % 2 == 0 else p.answer + "9" for i, p in enumerate(problems)]
    batch = RolloutBatch.from_ragged(
        prompt_ids=prompts,
        completion_ids=[tok(a)["input_ids"] for a in answers],
        behaviour_logprobs=[[-0.1] * len(tok(a)["input_ids"]) for a in answers],
        rewards=np.zeros(4),
        advantages=np.zeros(4),
        group_ids=[0, 0, 1, 1],
        policy_versions=[0] * 4,
        reward_versions=reward_versions,
    )
    return problems, answers, batch


def test_cli_rescores_with_the_configs_task(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = answered_rollouts()[2]
    table = ReplayTable(16)
    keys = table.insert(batch)
    saved = tmp_path / "saved"  # type: ignore[operator]
    table.save(saved)
    args = [
        "rescore",
        str(saved),
        "on_policy",
        "--set",
        "task.train_size=20",
        "--set",
        "task.eval_size=5",
    ]
    assert main([*args, "--dry-run"]) == 0
    assert "would rescore 4 rollouts in 2 groups: 4 rewards changed" in capsys.readouterr().out
    assert (ReplayTable.read(saved).get(keys)[0].rewards == 0).all()
    assert main(args) == 0
    stored = ReplayTable.read(saved).get(keys)[0]
    np.testing.assert_array_equal(stored.rewards[[0, 2]], [1.0, 1.0])
    assert (stored.rewards[[1, 3]] < 1.0).all() and (stored.correct == [1, 0, 1, 0]).all()
    # another task's rollouts are refused by name, nothing written
    other = [
        "rescore",
        str(saved),
        "on_policy",
        "--set",
        "task.dataset=spell_backward",
        "--set",
        "task.params={}",
        "--set",
        "task.prompt_template='{word}<'",
        "--set",
        "task.train_size=20",
        "--set",
        "task.eval_size=5",
    ]
    assert main(other) == 2
    assert "is not a problem of task 'spell_backward'" in capsys.readouterr().out


def test_cli_rescores_with_the_configs_reward_model_and_bumps_the_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problems, answers, batch = answered_rollouts(reward_versions=[2, 2, 3, 3])
    table = ReplayTable(16)
    keys = table.insert(batch)
    table.save(tmp_path / "saved")
    sets = ["task.train_size=20", "task.eval_size=5", "task.reward=model"]
    sets.append("reward_model.path=builtin:tiny-chain-sum-reward")
    args = ["rescore", str(tmp_path / "saved"), "on_policy"]
    assert main([*args, *(x for s in sets for x in ("--set", s))]) == 0
    assert "rescored 4 rollouts" in capsys.readouterr().out
    stored = ReplayTable.read(tmp_path / "saved").get_batch(keys)[0]
    expected = RewardModel("builtin:tiny-chain-sum-reward").score(
        [p.prompt for p in problems], answers
    )
    np.testing.assert_allclose(stored.rewards, expected, atol=1e-6)
    assert stored.reward_versions.tolist() == [4] * 4  # one above the newest stored
    assert stored.correct.tolist() == (expected >= 0.5).astype(int).tolist()
