"""The transformers generator: behaviour log-probs match the learner's under every sampling setting,
EOS stops, seeds repeat, sampling stays on the model's device."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.learner import LOGPROB_FLOOR, Learner, LearnerSettings, token_logprobs
from llm_replay.models import encode_prompts, load_policy


@pytest.fixture(scope="module")
def policy():  # type: ignore[no-untyped-def]
    return load_policy("builtin:tiny-chain-sum")


def make(policy, seed: int = 0) -> HFGenerator:  # type: ignore[no-untyped-def]
    model, tok = policy
    return HFGenerator(
        model, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, seed=seed
    )


PROMPTS = ["98+93-77=", "1+2=", "45-6+7="]


SETTINGS = [
    SamplingParams(max_new_tokens=6),
    SamplingParams(max_new_tokens=6, temperature=0.7),
    SamplingParams(max_new_tokens=6, top_k=4),
    SamplingParams(max_new_tokens=6, top_p=0.8),
    SamplingParams(max_new_tokens=6, temperature=1.3, top_k=6, top_p=0.9),
]


def fresh_sample(policy, params: SamplingParams) -> Sample:  # type: ignore[no-untyped-def]
    _, tok = policy
    prompts = encode_prompts(tok, PROMPTS)
    out = make(policy).generate(prompts, 4, params)
    batch = RolloutBatch.from_flat(
        prompt_ids=np.concatenate([prompts[i] for i in out.prompt_index]).astype(np.int32),
        prompt_lengths=[len(prompts[i]) for i in out.prompt_index],
        completion_ids=out.completion_ids,
        completion_lengths=out.completion_lengths,
        behaviour_logprobs=out.behaviour_logprobs,
        rewards=np.zeros(len(out)),
        advantages=np.linspace(-1.0, 1.0, len(out)),
        group_ids=out.prompt_index,
        policy_versions=np.zeros(len(out), np.int64),
        finish_reasons=out.finish_reasons,
    )
    return Sample.from_batch(batch, current_version=0)


@pytest.mark.parametrize(
    "params", SETTINGS, ids=lambda p: f"T{p.temperature}-k{p.top_k}-p{p.top_p}"
)
def test_fresh_rollouts_have_ratio_one_under_every_sampling_setting(policy, params) -> None:  # type: ignore[no-untyped-def]
    """Left-padded, KV-cached sampling and the right-padded training forward agree token by token,
    truncation included, so the learner's first step on fresh data clips nothing."""
    model, _ = policy
    sample = fresh_sample(policy, params)
    with torch.no_grad():
        logprobs = token_logprobs(
            model,
            torch.from_numpy(sample.input_ids).long(),
            torch.from_numpy(sample.attention_mask).long(),
            params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
        ).sampled
    mask = sample.loss_mask
    np.testing.assert_allclose(logprobs.numpy()[mask], sample.behaviour_logprobs[mask], atol=2e-5)
    learner = Learner(
        copy.deepcopy(model),
        torch.optim.SGD(model.parameters(), lr=0.0),
        LearnerSettings(
            temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, grad_clip=0
        ),
    )
    metrics = learner.step(sample)
    assert metrics["loss/ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["loss/kl_behaviour"] == pytest.approx(0.0, abs=1e-6)


def test_a_token_outside_todays_nucleus_has_ratio_zero_and_finite_gradient(policy) -> None:  # type: ignore[no-untyped-def]
    """Stale data sampled without truncation, trained with top-k 1: tokens that are not today's
    argmax get the floor log-prob, and the loss and its gradient stay finite."""
    model, _ = policy
    sample = fresh_sample(policy, SamplingParams(max_new_tokens=6))
    trained = copy.deepcopy(model)
    learner = Learner(
        trained,
        torch.optim.SGD(trained.parameters(), lr=0.0),
        LearnerSettings(top_k=1, grad_clip=0, kl_coef=0.1, entropy_coef=0.01),
        reference=copy.deepcopy(model),
    )
    with torch.no_grad():
        logprobs = learner._logprobs(trained, learner._tensors(sample, np.arange(len(sample))))
    mask = torch.from_numpy(sample.loss_mask)
    floored = (logprobs.sampled == LOGPROB_FLOOR) & mask
    assert floored.any() and (logprobs.sampled[mask & ~floored].abs() < 1e-5).all()
    metrics = learner.step(sample)
    assert [k for k, v in metrics.items() if not np.isfinite(v)] == []
    assert all(torch.isfinite(p.grad).all() for p in trained.parameters() if p.grad is not None)


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


def test_rng_must_live_on_the_models_device(policy) -> None:  # type: ignore[no-untyped-def]
    gen = make(policy)
    assert gen.rng.device == gen.device
    assert gen.seeded_rng(1).device == gen.device
    a = gen.generate([[3]], 4, SamplingParams(max_new_tokens=4), rng=gen.seeded_rng(7))
    b = gen.generate([[3]], 4, SamplingParams(max_new_tokens=4), rng=gen.seeded_rng(7))
    assert np.array_equal(a.completion_ids, b.completion_ids)


def test_steps_count_the_models_forward_passes(policy) -> None:  # type: ignore[no-untyped-def]
    """`steps` is what the meter's `generation_steps` charges: the prefill plus one forward per
    position decoded after the first, however few rows the batch has."""
    model, tok = policy
    generator = make(policy)
    calls = []
    forward = model.forward
    model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    try:
        for n, max_new in ((4, 5), (1, 1), (2, 8)):
            calls.clear()
            out = generator.generate(encode_prompts(tok, PROMPTS), n, SamplingParams(max_new))
            assert out.steps == len(calls) >= 1
            assert out.steps == int(out.completion_lengths.max())  # the batch runs to its longest
    finally:
        del model.forward
