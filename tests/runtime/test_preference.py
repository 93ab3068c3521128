"""The preference loop end to end on the tiny model: annotated pairs stored with their reference
log-probs and counted on their own meter, replayed pairs trained, a file's pairs learned from, a
failing annotator costing a counted failure and nothing stored, a resumed run logging what an
uninterrupted one does, and configurations it cannot run refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import ConfigError
from llm_replay.data.rollout import ANNOTATORS
from llm_replay.metrics import read_log
from llm_replay.metrics.compute import cost_on_basis
from llm_replay.runtime import SyncTrainer, build_trainer
from llm_replay.runtime.preference import PreferenceTrainer
from tests.conftest import tiny_config
from tests.runtime.test_sync import untimed_train_records

PAIR_SETS = ("preference.batch_pairs=6", "preference.pairs_per_group=2", "preference.capacity=32")


def preference_config(path: Path, preset: str = "dpo", *extra: str):  # type: ignore[no-untyped-def]
    return tiny_config(preset, path, *PAIR_SETS, *extra)


def train_records(run_dir: Path) -> list[dict[str, object]]:
    return [r for r in read_log(run_dir) if r["kind"] == "train"]


def test_online_dpo_stores_annotated_pairs_and_counts_the_annotations(tmp_path: Path) -> None:
    config = preference_config(tmp_path, "dpo", "train.iterations=3")
    trainer = build_trainer(config)
    assert isinstance(trainer, PreferenceTrainer)
    summary = trainer.run()
    records = train_records(tmp_path)
    candidates = 4 * 2  # prompts_per_step 4 × pairs_per_group 2, every iteration
    asked = [candidates - r["preference/identical_skipped"] for r in records]
    assert [r["preference/pairs_made"] + r["preference/ties"] for r in records] == asked
    assert [r["compute/annotations"] for r in records] == np.cumsum(asked).tolist()
    assert cost_on_basis("annotations", records[-1]) == sum(asked)
    made = sum(r["preference/pairs_made"] for r in records)
    assert made == len(trainer.pairs) > 0
    assert all(r["train/replayed_fraction"] == 0.0 for r in records if "loss/preference" in r)
    stored = trainer.pairs.table.get_batch(
        np.concatenate([trainer.pairs.chosen, trainer.pairs.rejected])
    )[0]
    assert np.isfinite(stored.reference_logprobs).all()
    assert set(stored.annotators.tolist()) == {ANNOTATORS.index("verifier")}
    assert stored.annotation_costs.sum() == made  # cost 1 a pair, half on each row
    assert summary["counts"]["annotations"] == sum(asked)
    assert summary["counts"]["forward_only_tokens"] > 0  # the reference forwards, charged


def test_replayed_pairs_fill_the_batch_and_teach(tmp_path: Path) -> None:
    config = preference_config(
        tmp_path,
        "dpo_replay",
        "train.iterations=6",
        "preference.replay=margin",
        "preference.steps_per_iteration=2",
    )
    trainer = build_trainer(config)
    trainer.run()
    records = train_records(tmp_path)
    assert max(r["train/replayed_fraction"] for r in records if "loss/preference" in r) > 0.5
    assert max(r["preference/pairs_trained"] for r in records if "loss/preference" in r) == 6
    assert isinstance(trainer, PreferenceTrainer)
    assert (trainer.pairs.wrongness < 1).any()  # trained pairs carry their measured σ(−βh)


def test_a_run_learns_from_a_file_of_pairs_alone(tmp_path: Path) -> None:
    records = [
        {"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)}
        for a in range(3)
        for b in range(4)
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records))
    config = preference_config(
        tmp_path / "run",
        "dpo_replay",
        "train.iterations=3",
        "preference.annotator=none",
        f"preference.file={path}",
    )
    trainer = build_trainer(config)
    trainer.run()
    log = train_records(tmp_path / "run")
    assert all(r["compute/annotations"] == 0 and r["compute/rollouts_generated"] == 0 for r in log)
    assert [r["preference/pairs_trained"] for r in log] == [6.0, 6.0, 6.0]
    assert isinstance(trainer, PreferenceTrainer) and len(trainer.pairs) == 12


def test_a_failing_annotator_is_counted_and_stores_nothing(tmp_path: Path) -> None:
    config = preference_config(tmp_path, "dpo_replay", "train.iterations=2")
    trainer = build_trainer(config)
    assert isinstance(trainer, PreferenceTrainer) and trainer.annotator is not None

    def down(*args: object) -> np.ndarray:
        raise ConnectionError("the annotation service is down")

    trainer.annotator.annotator.judge = down  # type: ignore[method-assign]
    trainer.run()
    records = train_records(tmp_path)
    assert [r["preference/annotation_failures"] for r in records] == [1.0, 2.0]
    assert [r["compute/annotation_failures"] for r in records] == [1.0, 2.0]
    assert len(trainer.pairs) == 0 and len(trainer.pairs.table) == 0
    assert all("loss/preference" not in r for r in records)  # nothing to train on
    skipped = sum(r["preference/identical_skipped"] for r in records)
    assert records[-1]["compute/annotations"] == 16 - skipped  # asked, unanswered, paid for


def test_resume_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    extra = ("train.iterations=5", "preference.replay=margin", "preference.steps_per_iteration=2")
    build_trainer(preference_config(tmp_path / "full", "dpo_replay", *extra)).run()

    class Interrupt(Exception):
        pass

    def stop_after_two(trainer: PreferenceTrainer, record: dict[str, object]) -> None:
        if trainer.iteration == 2:
            trainer.save_checkpoint()
            raise Interrupt

    cut = preference_config(tmp_path / "cut", "dpo_replay", *extra)
    with pytest.raises(Interrupt):
        build_trainer(cut).run(on_iteration=stop_after_two)
    build_trainer(cut).run(resume=True)
    assert untimed_train_records(tmp_path / "cut") == untimed_train_records(tmp_path / "full")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["runtime=threaded"], "preference.enabled = true: runtime=threaded"),
        (["replay.method=uniform"], "replay.method = 'uniform'"),
        (["preference.batch_pairs=0"], r"preference.batch_pairs = 0: must be finite and > 0"),
        (["preference.annotator=reward_model"], "preference.annotator = 'reward_model': set task"),
        (["preference.annotate=when_stale", "preference.replay=none"], "annotate = 'when_stale'"),
        (["preference.annotator=none"], "needs preference.file"),
        (["preference.correction=truncated_is", "generation.top_p=0.9"], "not with generation"),
        (["preference.file=/no/such.jsonl"], "preference.file = '/no/such.jsonl': no such file"),
        (["preference.loss=kto"], "preference.loss = 'kto'"),
        (["preference.stale_threshold=1.5"], "preference.stale_threshold = 1.5"),
        (["preference.replay=sometimes"], "preference.replay = 'sometimes'"),
    ],
)
def test_what_a_preference_run_cannot_do_is_refused_by_name(
    tmp_path: Path, sets: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        preference_config(tmp_path, "dpo", *sets)


def test_the_grpo_loop_refuses_a_preference_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PreferenceTrainer"):
        SyncTrainer(preference_config(tmp_path, "dpo"))


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tasks.test_reward_model import save_reward_model

    return save_reward_model(tmp_path_factory.mktemp("rm") / "tiny-rm")


@pytest.mark.parametrize("policy", ["keep", "evict"])
def test_a_reward_model_judge_stamps_its_version_and_stale_pairs_can_go(
    tmp_path: Path, rm_dir: Path, policy: str
) -> None:
    config = preference_config(
        tmp_path,
        "dpo_replay",
        "train.iterations=4",
        "task.reward=model",
        f"reward_model.path={rm_dir}",
        "reward_model.refresh_every=2",
        "reward_model.refresh_steps=2",
        "reward_model.refresh_batch=8",
        "preference.annotator=reward_model",
        f"preference.stale_pairs={policy}",
    )
    trainer = build_trainer(config)
    assert isinstance(trainer, PreferenceTrainer)
    trainer.run()
    keys = np.concatenate([trainer.pairs.chosen, trainer.pairs.rejected])
    stored = trainer.pairs.table.get_batch(keys)[0]
    assert set(stored.annotators.tolist()) == {ANNOTATORS.index("reward_model")}
    versions = set(stored.reward_versions.tolist())
    records = train_records(tmp_path)
    if policy == "evict":
        assert versions == {1}  # the refresh before iteration 3 dropped version 0's pairs
        assert records[2]["preference/stale_evicted"] > 0
    else:
        assert versions == {0, 1}


def test_the_annotation_budget_is_never_overspent_and_replay_goes_on(tmp_path: Path) -> None:
    config = preference_config(
        tmp_path,
        "dpo_replay",
        "train.iterations=5",
        "preference.annotation_budget=10",
        "preference.annotation_cost=1.5",
    )
    build_trainer(config).run()
    records = train_records(tmp_path)
    spent = [r["compute/annotation_cost"] for r in records]
    assert spent[-1] <= 10 and spent[-1] > 10 - 1.5 * 8  # trimmed to what the budget pays
    stopped = [i for i, r in enumerate(records) if r["preference/annotated"] == 0]
    assert stopped and all(spent[i] == spent[-1] for i in stopped)
    assert all("loss/preference" in records[i] for i in stopped)  # replayed pairs still train
