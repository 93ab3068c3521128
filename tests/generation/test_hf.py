"""The transformers generator: behaviour log-probs match the learner's, EOS stops, seeds repeat."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_replay.buffer import Sample
from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.learner import token_logprobs
from llm_replay.models import encode_prompts, load_policy
from llm_replay.rollout import RolloutBatch


@pytest.fixture(scope="module")
def policy():  # type: ignore[no-untyped-def]
    return load_policy("builtin:tiny-chain-sum")


def make(policy, seed: int = 0) -> HFGenerator:  # type: ignore[no-untyped-def]
    model, tok = policy
    return HFGenerator(
        model, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, seed=seed
    )


PROMPTS = ["98+93-77=", "1+2=", "45-6+7="]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_equal_learner_logprobs(policy, temperature: float) -> None:  # type: ignore[no-untyped-def]
    """Left-padded, KV-cached sampling and the right-padded training forward agree token by token."""
    model, tok = policy
    prompts = encode_prompts(tok, PROMPTS)
    out = make(policy).generate(
        prompts, 4, SamplingParams(max_new_tokens=6, temperature=temperature)
    )
    batch = RolloutBatch.from_flat(
        prompt_ids=np.concatenate([prompts[i] for i in out.prompt_index]).astype(np.int32),
        prompt_lengths=[len(prompts[i]) for i in out.prompt_index],
        completion_ids=out.completion_ids,
        completion_lengths=out.completion_lengths,
        behaviour_logprobs=out.behaviour_logprobs,
        rewards=np.zeros(len(out)),
        group_ids=out.prompt_index,
        policy_versions=np.zeros(len(out), np.int64),
        finish_reasons=out.finish_reasons,
    )
    sample = Sample.from_batch(batch, current_version=0)
    with torch.no_grad():
        logprobs, _ = token_logprobs(
            model,
            torch.from_numpy(sample.input_ids).long(),
            torch.from_numpy(sample.attention_mask).long(),
            temperature,
        )
    mask = sample.loss_mask
    np.testing.assert_allclose(logprobs.numpy()[mask], sample.behaviour_logprobs[mask], atol=2e-5)


def test_eos_ends_a_completion_and_lengths_cap(policy) -> None:  # type: ignore[no-untyped-def]
    _, tok = policy
    out = make(policy).generate(encode_prompts(tok, PROMPTS), 8, SamplingParams(max_new_tokens=3))
    for ids, reason in zip(out.completions(), out.finish_reasons, strict=True):
        assert 1 <= len(ids) <= 3
        eos_positions = np.flatnonzero(ids == tok.eos_token_id)
        if reason == "stop":
            assert eos_positions.tolist() == [len(ids) - 1]
        else:
            assert len(ids) == 3 and eos_positions.size == 0
    assert np.all(out.behaviour_logprobs <= 0)


def test_seeded_sampling_repeats_and_greedy_is_argmax(policy) -> None:  # type: ignore[no-untyped-def]
    _, tok = policy
    prompts = encode_prompts(tok, PROMPTS)
    params = SamplingParams(max_new_tokens=6)
    a = make(policy, seed=3).generate(prompts, 4, params)
    b = make(policy, seed=3).generate(prompts, 4, params)
    assert np.array_equal(a.completion_ids, b.completion_ids)
    c = make(policy, seed=4).generate(prompts, 4, params)
    assert not np.array_equal(a.completion_ids, c.completion_ids)
    greedy = make(policy).generate(prompts, 2, SamplingParams(max_new_tokens=6, temperature=0.0))
    first, second = greedy.completions()[0], greedy.completions()[1]
    assert np.array_equal(first, second)  # greedy ignores the RNG


def test_top_k_one_is_greedy_with_zero_logprob(policy) -> None:  # type: ignore[no-untyped-def]
    _, tok = policy
    prompts = encode_prompts(tok, PROMPTS)
    top1 = make(policy).generate(prompts, 2, SamplingParams(max_new_tokens=6, top_k=1))
    greedy = make(policy).generate(prompts, 2, SamplingParams(max_new_tokens=6, temperature=0.0))
    assert np.array_equal(top1.completion_ids, greedy.completion_ids)
    np.testing.assert_allclose(top1.behaviour_logprobs, 0.0, atol=1e-6)
    nucleus = make(policy).generate(prompts, 4, SamplingParams(max_new_tokens=6, top_p=0.5))
    assert np.all(nucleus.behaviour_logprobs > np.log(1e-3))  # tail tokens were cut off


def test_bad_arguments(policy) -> None:  # type: ignore[no-untyped-def]
    gen = make(policy)
    with pytest.raises(ValueError, match="n = 0"):
        gen.generate([[3]], 0, SamplingParams())
    with pytest.raises(ValueError, match="at least one token"):
        gen.generate([[]], 1, SamplingParams())
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
