"""DGG: the output layer's own gradient, the gate by hand (spikes, lasting shifts, NaN, zero), a
refused step that leaves the weights and the optimizer alone, its settings, and a gated run that
resumes exactly."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from llm_replay.algorithms.gradient_gate import HeadGradient
from llm_replay.algorithms.head_gate import HeadGate
from llm_replay.config import ConfigError
from llm_replay.learner import Learner, LearnerSettings
from llm_replay.models import load_policy
from llm_replay.runtime import SyncTrainer
from tests.conftest import tiny_config
from tests.runtime.test_sync import run_full_and_cut, untimed_train_records
from tests.test_learner import sample_for


def small_model(tied: bool) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
    )
    return Qwen2ForCausalLM(config)


def backward(model: Qwen2ForCausalLM, head: HeadGradient) -> None:
    ids = torch.randint(0, 32, (3, 5), generator=torch.Generator().manual_seed(1))
    with head:
        for part in (ids[:2], ids[2:]):  # two micro-batches add up
            logits = model(input_ids=part).logits
            (logits.log_softmax(-1)[..., 0].sum() * 0.5).backward()


def test_the_head_gradient_is_the_output_layer_weight_gradient() -> None:
    model = small_model(tied=False)
    head = HeadGradient(model)
    backward(model, head)
    assert head.total is not None
    torch.testing.assert_close(head.total, model.lm_head.weight.grad)
    assert head.norm() == pytest.approx(float(model.lm_head.weight.grad.norm()), rel=1e-5)


def test_with_tied_embeddings_it_leaves_out_the_input_embedding_use() -> None:
    """The tied weight's .grad holds both uses; the hook holds the output layer's alone, the
    same as the untied model's (same weights) gives."""
    untied, tied = small_model(tied=False), small_model(tied=True)
    with torch.no_grad():
        untied.lm_head.weight.copy_(untied.model.embed_tokens.weight)
    tied.load_state_dict(untied.state_dict())
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    heads = [HeadGradient(m) for m in (untied, tied)]
    for model, head in zip((untied, tied), heads, strict=True):
        backward(model, head)
    assert heads[0].total is not None and heads[1].total is not None
    torch.testing.assert_close(heads[1].total, heads[0].total)
    mixed = tied.model.embed_tokens.weight.grad
    assert not torch.allclose(mixed, heads[1].total)  # the input embedding's share is in .grad


def test_the_gate_by_hand() -> None:
    """ratio 2, warmup 2, decay 0.9: 1 and 3 are admitted (reference 1, then 1.2); 1.5 ≤ 2.4 is
    admitted (reference 1.23); 10 > 2.46 is refused and still enters the reference (2.107);
    2 ≤ 4.214 is admitted. NaN is refused and 0 admitted, neither touching the reference."""
    gate = HeadGate(ratio=2.0, warmup=2)
    assert [gate.admit(n) for n in (1.0, 3.0, 1.5, 10.0, 2.0)] == [True, True, True, False, True]
    assert gate.gated == 1 and gate.seen == 5
    assert gate.reference == pytest.approx(0.9 * (0.9 * 1.23 + 1.0) + 0.2)
    reference = gate.reference
    assert not gate.admit(float("nan")) and not gate.admit(float("inf")) and gate.gated == 3
    assert gate.admit(0.0) and gate.reference == reference and gate.seen == 5
    off = HeadGate()
    assert off.admit(1e9) and off.admit(float("nan")) and not off.active
    for ratio, warmup, name in ((0.5, 1, "head_gate"), (2.0, 0, "head_gate_warmup")):
        with pytest.raises(ValueError, match=name):
            HeadGate(ratio, warmup)
    with pytest.raises(ValueError, match="head gate state"):
        gate.load_state({"reference": 1.0})


def test_a_lasting_shift_is_absorbed_not_refused_for_ever() -> None:
    """After twenty norms of 1, norms of 5 forever: refused while the mean climbs (1.4, 1.76,
    2.08, 2.38, 2.64), admitted from the sixth on (5 ≤ 2 × 2.87)."""
    gate = HeadGate(ratio=2.0, warmup=2)
    for _ in range(20):
        assert gate.admit(1.0)
    assert [gate.admit(5.0) for _ in range(8)] == [False] * 5 + [True] * 3


def test_a_refused_step_leaves_weights_and_optimizer_as_they_were() -> None:
    model, _ = load_policy("builtin:tiny-chain-sum")
    sample = sample_for(model, np.random.default_rng(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    learner = Learner(model, optimizer, LearnerSettings(head_gate=1.5, head_gate_warmup=1))
    first = learner.step(sample)
    assert first["loss/gated"] == 0.0 and first["loss/head_grad_norm"] > 0
    weights = copy.deepcopy(model.state_dict())
    moments = copy.deepcopy(optimizer.state_dict())
    learner.gate.reference = first["loss/head_grad_norm"] / 100  # the next norm is a surge
    second = learner.step(sample)
    assert second["loss/gated"] == 1.0 and learner.version == 2
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[key])
    for index, state in optimizer.state_dict()["state"].items():
        torch.testing.assert_close(state["exp_avg"], moments["state"][index]["exp_avg"])
    learner.gate.reference = second["loss/head_grad_norm"] * 10
    assert learner.step(sample)["loss/gated"] == 0.0
    assert any(not torch.equal(v, weights[k]) for k, v in model.state_dict().items())


def test_gate_settings_and_runtimes_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.head_gate = 0\.5: must be 0"):
        tiny_config(None, tmp_path, "algorithm.head_gate=0.5")
    with pytest.raises(ConfigError, match=r"algorithm\.head_gate = 2\.0: not supported"):
        tiny_config(None, tmp_path, "algorithm.head_gate=2.0", "runtime=threaded")
    with pytest.raises(ConfigError, match=r"algorithm\.head_gate: not with preference"):
        tiny_config("dpo", tmp_path, "algorithm.head_gate=2.0")


GATED = ("algorithm.head_gate=1.05", "algorithm.head_gate_warmup=2")


def test_a_gated_run_resumes_as_the_uninterrupted_one_runs(tmp_path: Path) -> None:
    run_full_and_cut("uniform", tmp_path, *GATED)
    full = untimed_train_records(tmp_path / "full")
    assert untimed_train_records(tmp_path / "cut") == full
    assert any(float(r.get("loss/gated", 0.0)) > 0 for r in full)  # type: ignore[arg-type]
    assert all("loss/head_grad_norm" in r for r in full)
    SyncTrainer(tiny_config("uniform", tmp_path / "plain", "train.iterations=2")).run()
    plain = untimed_train_records(tmp_path / "plain")  # no gate, nothing measured: no cost
    assert "loss/head_grad_norm" not in plain[-1] and "loss/gated" not in plain[-1]
