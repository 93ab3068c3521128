"""Prompt skipping (GRESO): the rule by hand, and a run that skips, pays only for what it
generates, and resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import ConfigError
from llm_replay.config.prompts import PromptSkipConfig
from llm_replay.data.batch import RolloutBatch
from llm_replay.metrics import read_log
from llm_replay.runtime import SyncTrainer
from llm_replay.runtime.prompt_skip import PromptSkipper, uninformative_groups
from tests.conftest import tiny_config
from tests.runtime.test_sync import run_full_and_cut, untimed_train_records


def test_uninformative_groups_by_hand() -> None:
    batch = RolloutBatch.from_ragged(
        prompt_ids=[[1]] * 6,
        completion_ids=[[2]] * 6,
        behaviour_logprobs=[[-1.0]] * 6,
        rewards=[1.0, 1.0, 0.0, 1.0, 0.0, 0.0],
        advantages=[0.0] * 6,
        group_ids=[10, 10, 11, 11, 12, 12],
        policy_versions=[0] * 6,
    )
    assert uninformative_groups(batch, np.array([10, 11, 12])).tolist() == [True, False, True]


def test_a_flagged_prompt_is_retested_with_a_chance_that_grows_with_its_skips() -> None:
    """retest 0.25: a flagged prompt's chance is 0.25, 0.5, 0.75 and then 1 — by its fourth
    consideration it is generated whatever the draws."""
    skipper = PromptSkipper(PromptSkipConfig(enabled=True, after=2, retest=0.25), 4, seed=0)
    prompts = np.array([0, 1, 2, 3])
    skipper.observe(prompts, np.array([True, True, False, False]))
    assert skipper.choose(prompts).all()  # one uninformative group is not `after` = 2
    skipper.observe(prompts, np.array([True, False, False, True]))
    assert skipper.streak.tolist() == [2, 0, 0, 1]
    kept_at: int | None = None
    for attempt in range(4):
        keep = skipper.choose(np.array([0, 1]))
        assert keep[1]  # never flagged
        if keep[0]:
            kept_at = attempt
            break
        assert skipper.skips[0] == attempt + 1
    assert kept_at is not None
    skipper.observe(np.array([0]), np.array([False]))  # the re-test came back informative
    metrics = skipper.metrics()
    assert metrics["skip/retests"] == 1 and metrics["skip/retest_informative_share"] == 1.0
    assert metrics["skip/skipped"] == kept_at
    assert skipper.streak[0] == 0 and skipper.skips[0] == 0


def test_skip_knobs_and_runtimes_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retest"):
        PromptSkipConfig(enabled=True, retest=0.0).check()
    with pytest.raises(ConfigError, match=r"generation\.skip\.enabled = true: not supported"):
        tiny_config(None, tmp_path, "generation.skip.enabled=true", "runtime=threaded")


SKIP = ("generation.skip.enabled=true", "generation.skip.retest=0.2", "task.train_size=24")


def test_a_run_skips_uninformative_prompts_and_pays_only_for_what_it_generates(
    tmp_path: Path,
) -> None:
    config = tiny_config("on_policy", tmp_path, "train.iterations=8", *SKIP)
    summary = SyncTrainer(config).run()
    log = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    last = log[-1]
    assert last["skip/skipped"] > 0 and 0 < last["skip/rate"] < 1
    assert last["skip/considered"] == last["skip/skipped"] + 8 * config.generation.prompts_per_step
    generated = 8 * config.generation.rollouts_per_step  # every round is full, skips cost nothing
    assert summary["counts"]["rollouts_generated"] == generated


def test_a_resumed_run_skips_what_the_uninterrupted_one_does(tmp_path: Path) -> None:
    # 8 prompts a round of 24: the resume at round 3 falls where the second epoch, the one
    # that skips, begins
    run_full_and_cut("on_policy", tmp_path, *SKIP, "generation.prompts_per_step=8")

    assert untimed_train_records(tmp_path / "cut") == untimed_train_records(tmp_path / "full")
    assert untimed_train_records(tmp_path / "full")[-1]["skip/skipped"] > 0
    state = json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())
    assert "prompt_skip" in state
