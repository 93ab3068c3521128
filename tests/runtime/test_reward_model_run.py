"""A run trained on a learned reward model: versions stored, the verifier watching, refreshes
charged to the meter, and a resumed run that logs what an uninterrupted one does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import ConfigError
from llm_replay.metrics import read_log
from llm_replay.metrics.compute import cost_on_basis
from llm_replay.runtime.sync import SyncTrainer
from llm_replay.tasks import SafeScorer
from llm_replay.tasks.reward_model import ModelScorer, RewardModel
from tests.conftest import tiny_config
from tests.runtime.test_sync import run_full_and_cut, untimed_train_records
from tests.tasks.test_reward_model import save_reward_model

POSITIVE = "positive"


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_reward_model(tmp_path_factory.mktemp("rm") / "tiny-rm")


def learned(rm_dir: Path) -> tuple[str, ...]:
    return (
        "task.reward=model",
        f"reward_model.path={rm_dir}",
        "reward_model.refresh_every=2",
        "reward_model.refresh_steps=4",
        "reward_model.refresh_batch=8",
    )


def test_a_run_on_a_reward_model_stores_versions_and_pays_for_the_model(
    tmp_path: Path, rm_dir: Path
) -> None:
    config = tiny_config(POSITIVE, tmp_path, "train.iterations=4", *learned(rm_dir))
    trainer = SyncTrainer(config)
    assert isinstance(trainer.evaluator.scorer, SafeScorer)  # accuracy is the verifier's
    summary = trainer.run()
    train = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    assert [r["reward_model/version"] for r in train] == [0, 0, 1, 1]
    assert [r.get("reward_model/refreshes") for r in train] == [None, None, 1.0, None]
    for record in train:
        assert 0 <= record["reward/verifier_correct_rate"] <= 1
        assert 0 <= record["reward_model/agreement"] <= 1
    table = trainer.replay.method.table
    stored = set(np.unique(table.storage.reward_version[table.storage.live_slots()]).tolist())
    assert stored == {0, 1}
    counts = summary["counts"]
    assert counts["reward_model_tokens"] > 0 and counts["reward_model_train_tokens"] > 0
    last = train[-1]
    assert last["compute/reward_model_cost"] > 0
    without = {k: v for k, v in last.items() if k != "compute/reward_model_cost"}
    assert cost_on_basis("mu_5", last) == pytest.approx(
        cost_on_basis("mu_5", without) + last["compute/reward_model_cost"]
    )


def test_a_resumed_run_with_refreshes_logs_the_uninterrupted_one(
    tmp_path: Path, rm_dir: Path
) -> None:
    run_full_and_cut(POSITIVE, tmp_path, *learned(rm_dir))

    assert untimed_train_records(tmp_path / "cut") == untimed_train_records(tmp_path / "full")
    assert untimed_train_records(tmp_path / "full")[-1]["reward_model/version"] == 2
    state = json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())
    assert state["reward_model"]["version"] == 2 and state["reward_model"]["window"]
    assert (tmp_path / "cut" / "checkpoint" / "reward_model" / "model.safetensors").is_file()


@pytest.mark.parametrize("policy", ["evict", "rescore"])
def test_stale_rewards_in_a_run_leave_only_the_current_models_rewards(
    tmp_path: Path, rm_dir: Path, policy: str
) -> None:
    config = tiny_config(
        POSITIVE,
        tmp_path,
        "train.iterations=3",
        *learned(rm_dir),
        "replay.stale_rewards.enabled=true",
        f"replay.stale_rewards.policy={policy}",
        "replay.stale_rewards.budget=4096",
    )
    trainer = SyncTrainer(config)
    summary = trainer.run()
    table = trainer.replay.method.table
    assert set(table.storage.reward_version[table.storage.live_slots()].tolist()) == {1}
    last = [r for r in read_log(tmp_path) if r["kind"] == "train"][-1]
    assert last[f"stale_rewards/{'evicted' if policy == 'evict' else 'rescored'}"] > 0
    if policy == "rescore":  # the re-scoring forwards are paid for
        fresh = 3 * config.generation.rollouts_per_step
        assert summary["counts"]["reward_calls"] > fresh


def test_refresh_from_loads_the_listed_checkpoints_in_turn(tmp_path: Path, rm_dir: Path) -> None:
    later = [save_reward_model(tmp_path / f"rm{i}", seed=i) for i in (1, 2)]
    listed = "reward_model.refresh_from=[" + ",".join(str(p) for p in later) + "]"
    base = (
        "task.reward=model",
        f"reward_model.path={rm_dir}",
        "reward_model.refresh_every=1",
    )
    config = tiny_config(None, tmp_path / "run", "train.iterations=4", *base, listed)
    trainer = SyncTrainer(config)
    trainer.run()
    train = [r for r in read_log(tmp_path / "run") if r["kind"] == "train"]
    assert [r["reward_model/version"] for r in train] == [0, 1, 2, 2]  # then the list is spent
    scorer = trainer.scorer
    assert isinstance(scorer, ModelScorer)
    expected = RewardModel(str(later[1])).score(["1+2="], ["3"])
    np.testing.assert_allclose(scorer.model.score(["1+2="], ["3"]), expected, atol=1e-6)
    with pytest.raises(ConfigError, match=r"reward_model\.refresh_from\[1\] = .*no such directory"):
        tiny_config(None, tmp_path, *base, f"reward_model.refresh_from=[{later[0]},{tmp_path}/no]")
