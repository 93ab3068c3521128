"""A learned reward model: loading and its errors, batched scoring, retraining, time limits."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import ConfigError
from llm_replay.models import tiny_reward_model
from llm_replay.models.loading import ModelLoadError
from llm_replay.tasks import Problem
from llm_replay.tasks.reward_model import ModelScorer, RewardModel
from tests.conftest import ROOT, tiny_config

PROMPTS = ["1+2=", "13+4=", "9-5=", "1+1+1=", "7=", "40-2="]
COMPLETIONS = ["3", "17", "4", "3", "7777777", "38"]


def save_reward_model(directory: Path, *, seed: int = 0, **overrides: object) -> Path:
    model, tokenizer = tiny_reward_model(seed=seed, **overrides)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_reward_model(tmp_path_factory.mktemp("rm") / "tiny-rm")


def test_a_batch_scores_as_its_rows_one_by_one(rm_dir: Path) -> None:
    model = RewardModel(str(rm_dir), batch_size=4)
    together = model.score(PROMPTS, COMPLETIONS)
    alone = np.array([model.score([p], [c])[0] for p, c in zip(PROMPTS, COMPLETIONS, strict=True)])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-6)
    assert ((together > 0) & (together < 1)).all()  # sigmoid output
    counted = sum(len(p + c) for p, c in zip(PROMPTS, COMPLETIONS, strict=True))
    assert model.tokens_scored == 2 * counted  # every real token, padding excluded
    logits = RewardModel(str(rm_dir), output="logit").score(PROMPTS, COMPLETIONS)
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), together, atol=1e-6)


def test_retraining_fits_the_labels_and_bumps_the_version(rm_dir: Path, tmp_path: Path) -> None:
    model = RewardModel(str(rm_dir), batch_size=4)
    labels = [1, 1, 0, 1, 0, 0]
    stats = model.retrain(PROMPTS, COMPLETIONS, labels, steps=40, batch_size=4, lr=2e-3, seed=0)
    assert model.version == 1 and model.tokens_trained > 0
    assert stats["loss_after"] < stats["loss_before"] and stats["accuracy_after"] == 1.0
    scores = model.score(PROMPTS, COMPLETIONS)
    assert ((scores >= 0.5) == np.asarray(labels, bool)).all()
    model.save(tmp_path / "v1")
    again = RewardModel(str(rm_dir))
    again.load_weights(tmp_path / "v1", version=1)
    np.testing.assert_allclose(again.score(PROMPTS, COMPLETIONS), scores, atol=1e-6)
    assert again.version == 1
    with pytest.raises(ModelLoadError, match="not this reward model's weights"):
        RewardModel(str(save_reward_model(tmp_path / "wide", hidden_size=64))).load_weights(
            tmp_path / "v1", version=1
        )


@pytest.mark.parametrize(
    ("what", "match"),
    [
        ("missing", r"reward_model\.path = '.*nowhere': no such directory"),
        ("causal", r"reward_model\.path = .*not a sequence classifier"),
        ("two_labels", r"reward_model\.path = .*has 2 labels; a reward model has one output"),
    ],
)
def test_a_bad_reward_model_path_is_one_line_naming_the_field(
    tmp_path: Path, rm_dir: Path, what: str, match: str
) -> None:
    path = {
        "missing": tmp_path / "nowhere",
        "causal": ROOT / "src/llm_replay/assets/tiny-chain-sum",
        "two_labels": save_reward_model(tmp_path / "two", num_labels=2),
    }[what]
    with pytest.raises(ConfigError, match=match) as error:
        tiny_config(None, tmp_path, "task.reward=model", f"reward_model.path={path}")
    assert "\n" not in str(error.value)
    with pytest.raises(ModelLoadError, match=r"reward_model\.path"):
        RewardModel(str(path))


def test_the_reward_model_and_the_reward_go_together(tmp_path: Path, rm_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"reward_model\.path = None: task\.reward = 'model'"):
        tiny_config(None, tmp_path, "task.reward=model")
    with pytest.raises(ConfigError, match=r"reward_model\.path = .*task\.reward = 'score'"):
        tiny_config(None, tmp_path, f"reward_model.path={rm_dir}")
    for runtime in ("threaded", "ray"):  # the runtime object says so (config.runtimes)
        with pytest.raises(ConfigError, match=f"runtime={runtime} does not carry a reward model"):
            tiny_config(
                None,
                tmp_path,
                "task.reward=model",
                f"reward_model.path={rm_dir}",
                f"runtime={runtime}",
            )
    with pytest.raises(ConfigError, match=r"reward_model\.device = 'tpu'"):
        tiny_config(None, tmp_path, "reward_model.device=tpu")
    with pytest.raises(ConfigError, match=r"reward_model\.output = 'softmax'"):
        tiny_config(None, tmp_path, "reward_model.output=softmax")


def test_a_batch_that_fails_or_hangs_gets_the_failure_reward(
    rm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = RewardModel(str(rm_dir), batch_size=2)
    problems = [Problem(p, "") for p in PROMPTS]
    scorer = ModelScorer(model, task=None, timeout_s=0.5, failure_reward=-1.0)  # type: ignore[arg-type]
    calls = {"n": 0}
    real = model.score

    def flaky(prompts: list[str], completions: list[str]) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("CUDA out of memory")
        if calls["n"] == 3:
            time.sleep(2.0)
        return real(prompts, completions)

    monkeypatch.setattr(model, "score", flaky)
    rewards = scorer.score(COMPLETIONS, problems)
    assert (rewards[2:6] == -1.0).all() and (rewards[:2] > 0).all()
    assert (scorer.counts.errors, scorer.counts.timeouts, scorer.counts.calls) == (2, 2, 6)
    scorer.close()
