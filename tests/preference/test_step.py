"""One preference step: DPO steps widen the margin of the pairs trained on, the truncated
importance weight stays under its cap, micro-batches of whole pairs give the full batch's step,
and malformed batches are refused before the weights move."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from llm_replay.algorithms.losses.pairs import build_pair_loss
from llm_replay.buffer import Sample
from llm_replay.config import load_config
from llm_replay.models import load_policy
from llm_replay.preference.files import file_pairs
from llm_replay.preference.pairs import ReferenceScorer
from llm_replay.preference.step import preference_step
from llm_replay.runtime.components import build_learner

RECORDS = [("1+2=", "3", "4"), ("10+5=", "15", "51"), ("7+7=", "14", "41"), ("2+9=", "11", "12")]


def setup(micro_batch: int = 256):  # type: ignore[no-untyped-def]
    config = load_config("dpo", [f"train.micro_batch_size={micro_batch}", "optim.lr=1e-3"])
    model, tokenizer = load_policy("builtin:tiny-chain-sum")
    torch.manual_seed(0)
    reference = ReferenceScorer(copy.deepcopy(model), temperature=0.7)
    return build_learner(config, model), tokenizer, reference


def pair_sample(tmp_path, tokenizer, reference) -> Sample:  # type: ignore[no-untyped-def]
    import json

    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "\n".join(json.dumps({"prompt": p, "chosen": c, "rejected": r}) for p, c, r in RECORDS)
    )
    batch = file_pairs(path, tokenizer, reference, chat_template="off")
    return Sample.from_batch(batch, current_version=0)


def test_dpo_steps_widen_the_margin_of_the_pairs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    learner, tokenizer, reference = setup()
    sample = pair_sample(tmp_path, tokenizer, reference)
    loss = build_pair_loss("dpo", beta=1.0)
    first, wrong_before = preference_step(learner, sample, loss)
    assert first["preference/margin"] == pytest.approx(0.0, abs=1e-5)  # policy = reference
    assert wrong_before.tolist() == pytest.approx([0.5] * 4, abs=1e-5)
    for _ in range(5):
        last, wrong = preference_step(learner, sample, loss)
    assert last["preference/margin"] > 0.5 and last["preference/accuracy"] == 1.0
    assert (wrong < 0.5).all() and last["loss/preference"] < first["loss/preference"]
    assert learner.version == 6
    assert last["train/rollouts"] == 8 and last["preference/pairs_trained"] == 4


def test_micro_batches_of_whole_pairs_take_the_full_batchs_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    results = []
    for micro in (256, 2):  # 2 rows: one pair a micro-batch
        learner, tokenizer, reference = setup(micro)
        sample = pair_sample(tmp_path, tokenizer, reference)
        preference_step(learner, sample, build_pair_loss("ipo", beta=0.5))
        results.append(torch.cat([p.detach().flatten() for p in learner.model.parameters()]))
    # Adam divides by the gradient's own scale: float noise on near-zero entries moves ~1e-5,
    # a wrong normaliser would move every entry by ~lr = 1e-3
    torch.testing.assert_close(results[0], results[1], rtol=1e-3, atol=3e-5)


def test_the_truncated_importance_weight_stays_under_its_cap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    learner, tokenizer, reference = setup()
    sample = pair_sample(tmp_path, tokenizer, reference)
    # behaviour log-probs far below the current policy's: the raw ratio is huge
    stale = dataclasses.replace(sample, behaviour_logprobs=sample.behaviour_logprobs - 3.0)
    metrics, _ = preference_step(
        learner, stale, build_pair_loss("dpo", 0.1), correction="truncated_is", is_cap=1.5
    )
    assert metrics["preference/weight_mean"] == pytest.approx(1.5)


def test_malformed_batches_are_refused_before_the_weights_move(tmp_path) -> None:  # type: ignore[no-untyped-def]
    learner, tokenizer, reference = setup()
    sample = pair_sample(tmp_path, tokenizer, reference)
    before = [p.detach().clone() for p in learner.model.parameters()]
    loss = build_pair_loss("dpo", 0.1)
    half = Sample.concat(
        [sample, Sample.from_batch(sample.to_batch().select([0]), current_version=0)]
    )
    with pytest.raises(ValueError, match="whole pairs"):
        preference_step(learner, half, loss)
    flipped = dataclasses.replace(sample, rewards=sample.rewards[::-1].copy())
    with pytest.raises(ValueError, match=r"chosen \(reward 1\) then rejected"):
        preference_step(learner, flipped, loss)
    missing = dataclasses.replace(sample, reference_logprobs=np.full(len(sample), np.nan))
    with pytest.raises(ValueError, match="reference_logprobs"):
        preference_step(learner, missing, loss)
    after = list(learner.model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert learner.version == 0
