"""ReplayGRPOTrainer: wraps TRL (equivalence with GRPOTrainer), replays what it should, resumes."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from tests.conftest import TINY_KNOBS
from trl import GRPOConfig, GRPOTrainer

from llm_replay.integrations.trl import ReplayGRPOConfig, ReplayGRPOTrainer
from llm_replay.methods import METHODS
from llm_replay.models import load_policy

PROMPTS = [f"{a}+{b}=" for a in range(10) for b in range(10)]
DATASET = Dataset.from_dict({"prompt": PROMPTS, "answer": [str(eval(p[:-1])) for p in PROMPTS]})


def starts_right(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """Reward 1 when the completion starts with the answer's first digit (often enough to learn)."""
    return [float(c.strip()[:1] == a[:1]) for c, a in zip(completions, answer, strict=True)]


def settings(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 16,
        "num_generations": 8,
        "max_completion_length": 8,
        "max_steps": 3,
        "learning_rate": 1e-4,
        "bf16": False,
        "activation_checkpointing": False,
        "lr_scheduler_type": "constant",
        "optim": "adamw_torch",
        "loss_type": "dapo",
        "beta": 0.0,
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "temperature": 0.9,
        "seed": 0,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "use_cpu": True,
        "disable_tqdm": True,
    }
    base.update(extra)
    return base


def build(config: Any, trainer_cls: type = ReplayGRPOTrainer) -> Any:
    model, tokenizer = load_policy("builtin:tiny-chain-sum", device="cpu", dtype="float32")
    return trainer_cls(
        model=model,
        reward_funcs=starts_right,
        args=config,
        train_dataset=DATASET,
        processing_class=tokenizer,
    )


def trained(trainer: Any) -> tuple[list[float], dict[str, torch.Tensor]]:
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


# ---------------------------------------------------------------------- wrap, never alter
@pytest.mark.parametrize(
    ("loss_type", "accumulation"),
    [("dapo", 1), ("bnpo", 2)],
    ids=["dapo-one-step-per-generation", "bnpo-two-micro-steps"],
)
def test_on_policy_reproduces_grpo_trainer(tmp_path: Path, loss_type: str, accumulation: int):
    """Same seed and config: the same losses and the same weights after 3 steps (CPU, fp32).

    One micro-step a generation: both sides train on the same tensors, so the tolerance is tight
    (observed difference 0). Two micro-steps: TRL pads each micro-batch to its generation batch's
    longest completion and ours to the micro-batch's own, so the sums run over other shapes and
    differ in their last bits, by an amount that depends on the machine's kernels, and Adam
    scales such noise up on near-zero gradients (observed: losses 7e-9, weights 4.6e-7). There
    the tolerance is 1e-6 on losses of ~0.05 and 1e-5 on weights, a tenth of one step at lr 1e-4."""
    extra = {"loss_type": loss_type, "gradient_accumulation_steps": accumulation}
    loss_rtol, loss_atol, weight_atol = 1e-6, 1e-9, 1e-6
    if accumulation > 1:
        extra["per_device_train_batch_size"] = 8
        loss_rtol, loss_atol, weight_atol = 1e-5, 1e-6, 1e-5
    plain_losses, plain_weights = trained(
        build(GRPOConfig(**settings(tmp_path, **extra)), GRPOTrainer)
    )
    ours = build(ReplayGRPOConfig(**settings(tmp_path, **extra)))
    our_losses, our_weights = trained(ours)
    assert len(our_losses) == len(plain_losses) == 3
    np.testing.assert_allclose(our_losses, plain_losses, rtol=loss_rtol, atol=loss_atol)
    for name, value in plain_weights.items():
        torch.testing.assert_close(our_weights[name], value, rtol=0, atol=weight_atol)
    assert ours.meter.counts["rollouts_trained"] == ours.meter.counts["rollouts_generated"]
    moved = max((plain_weights[k] - build_weights()[k]).abs().max().item() for k in plain_weights)
    assert moved > 1e-5  # the comparison is not between two untrained models


def build_weights() -> dict[str, torch.Tensor]:
    model, _ = load_policy("builtin:tiny-chain-sum", device="cpu", dtype="float32")
    return dict(model.state_dict())


def test_overrides_wrap_trl_and_copy_nothing() -> None:
    """Every TRL method we override calls super() and is a few lines, not a copy of TRL's."""
    ours_first = ReplayGRPOTrainer.__mro__[: ReplayGRPOTrainer.__mro__.index(GRPOTrainer)]
    overridden = [  # ours and the kit's (`frontend.checkpoint.TrainerCheckpoints`)
        name
        for cls in ours_first
        for name, member in vars(cls).items()
        if callable(member) and hasattr(GRPOTrainer, name) and not name.startswith("__")
    ]
    assert set(overridden) == {
        "_prepare_inputs",
        "_generate_and_score_completions",
        "_calculate_rewards",
        "_compute_loss",  # the token controls, around TRL's own loss
        "_get_per_token_logps_and_entropies",
        "_save_checkpoint",
        "_load_optimizer_and_scheduler",
    }
    for name in overridden:
        ours = inspect.getsource(getattr(ReplayGRPOTrainer, name))
        theirs = inspect.getsource(getattr(GRPOTrainer, name))
        assert f"super().{name}(" in ours, name
        assert len(ours.splitlines()) <= 25, name
        assert len(ours.splitlines()) < len(theirs.splitlines()) or len(theirs.splitlines()) < 25


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_registered_method_trains_inside_trl(tmp_path: Path, method: str):
    own = {f.name for f in dataclasses.fields(METHODS[method].Config)}
    knobs = {k: v for k, v in {**TINY_KNOBS, "phase1_iterations": 0}.items() if k in own}
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=3), replay_method=method, replay_knobs=knobs
    )
    trainer = build(config)
    trainer.train()
    assert trainer.state.global_step == 3
    assert trainer.meter.counts["rollouts_trained"] >= 3 * 8
    assert any(k.startswith("replay/") for k in trainer.state.log_history[-2])


# ---------------------------------------------------------------------- replay does what it says
class RatioProbe(ReplayGRPOTrainer):
    """Records, per trained micro-batch, the largest |log π_θ − log π_behaviour| and the ages."""

    probes: list[tuple[float, float]]

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model, ids, mask, inputs["completion_ids"].size(1)
            )
        gap = ((logps - inputs["old_per_token_logps"]).abs() * inputs["completion_mask"]).max()
        self.probes = [*getattr(self, "probes", []), (float(gap), self.last_draw["replay/age_max"])]
        return super()._compute_loss(model, inputs)


def test_replayed_rows_are_corrected_against_the_policy_that_generated_them(tmp_path: Path):
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=6),
        replay_method="uniform",
        replay_knobs={"capacity": 64, "replay_ratio": 2},
    )
    trainer = build(config, RatioProbe)
    trainer.train()
    fresh = [gap for gap, age in trainer.probes if age == 0]
    stale = [gap for gap, age in trainer.probes if age > 0]
    assert fresh and stale
    assert max(fresh) < 1e-4  # fresh rows: the stored behaviour is the current policy
    assert max(stale) > 1e-3  # replayed rows: their own behaviour, not the current policy
    assert trainer.rounds == 3 and trainer.state.global_step == 6  # y·R/B = 2 steps per round


def test_groups_are_stored_whole_with_their_generation_advantages(tmp_path: Path):
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=4),
        replay_method="uniform",
        replay_knobs={"capacity": 64, "replay_ratio": 2},
    )
    trainer = build(config)
    trainer.train()
    table = trainer.pipeline.method.table
    sample, found = table.get(np.arange(table.size * 4))
    groups, counts = np.unique(sample.group_ids[: int(found.sum())], return_counts=True)
    assert len(groups) == 4 and np.all(counts == 8)
    for group in groups:
        members = sample.group_ids == group
        assert abs(sample.advantages[members].sum()) < 1e-4  # (R − mean) / std sums to 0


def test_asymre_trains_on_shifted_advantages_without_a_ratio(tmp_path: Path):
    seen: list[dict[str, Any]] = []

    class Spy(ReplayGRPOTrainer):
        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            seen.append(inputs)
            return super()._compute_loss(model, inputs)

    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=2, scale_rewards="none"),
        replay_method="positive",
        replay_knobs={"capacity": 64, "replay_ratio": 2},
        replay_loss="asymre",
        replay_delta_v=-0.1,
    )
    trainer = build(config, Spy)
    trainer.train()
    assert seen and all("old_per_token_logps" not in inputs for inputs in seen)
    # Dr. GRPO advantages of 8 binary rewards are multiples of 1/8; AsymRE adds 0.1 to each
    shifted = torch.cat([inputs["advantages"] for inputs in seen]).numpy() - 0.1
    np.testing.assert_allclose(shifted * 8, np.round(shifted * 8), atol=1e-5)


def test_the_schedule_recipe_anneals_to_on_policy_over_max_steps(tmp_path: Path):
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=10, scale_rewards="none"),
        replay_method="positive_schedule",
        replay_knobs={"capacity": 64},
        replay_loss="asymre",
    )
    assert config.replay.method == "positive" and config.replay.settings.capacity == 64
    anneal = dict(config.replay.enabled_options())["anneal"]
    assert (anneal.mode, anneal.start, anneal.end) == ("schedule", 0.1, 0.6)
    trainer = build(config)
    trainer.train()
    scales = [
        r["replay/anneal/scale"] for r in trainer.state.log_history if "replay/anneal/scale" in r
    ]
    # full replay before 10% of max_steps, on-policy from 60%: s = 1 - (step/10 - 0.1) / 0.5
    assert scales[0] == 1.0 and scales[-1] == 0.0, scales
    assert all(a >= b for a, b in itertools.pairwise(scales)), scales


def test_auto_turns_on_kl_cov_and_adaptive_rollouts_where_left_none(tmp_path: Path):
    fields = {"replay_method": "auto", "replay_loss": "asymre"}
    config = ReplayGRPOConfig(**settings(tmp_path, scale_rewards="none"), **fields)
    schedule = ReplayGRPOConfig(
        **settings(tmp_path, scale_rewards="none"),
        **{**fields, "replay_method": "positive_schedule"},
    )
    assert config.replay.to_dict() == schedule.replay.to_dict()
    control = config.token_control
    assert (control.mode, control.rows, control.fraction, control.coef) == (
        "kl_cov",
        "replayed",
        0.05,
        1.0,
    )
    adaptive = config.adaptive
    assert (adaptive.enabled, adaptive.stage_size, adaptive.reuse) == (True, 2, True)
    assert not schedule.token_control.active and not schedule.adaptive.enabled
    # what the user sets wins, field by field of TRL's config
    plain = ReplayGRPOConfig(
        **settings(tmp_path, scale_rewards="none"),
        **fields,
        replay_token_control={"mode": "off"},
        replay_adaptive={"enabled": False},
    )
    assert not plain.token_control.active and not plain.adaptive.enabled
    # a partial field goes over the recipe's, field by field
    partial = ReplayGRPOConfig(
        **settings(tmp_path, scale_rewards="none"),
        **fields,
        replay_token_control={"fraction": 0.2},
        replay_adaptive={"stage_size": 4},
    )
    assert (partial.token_control.mode, partial.token_control.fraction) == ("kl_cov", 0.2)
    assert partial.token_control.rows == "replayed"
    assert (partial.adaptive.enabled, partial.adaptive.stage_size) == (True, 4)
    # a TRL setting the recipe's adaptive rollouts cannot meet is refused, naming the recipe
    with pytest.raises(ValueError, match=r"steps_per_generation = 2.*replay_method 'auto' turns"):
        ReplayGRPOConfig(
            **settings(tmp_path, scale_rewards="none", steps_per_generation=2), **fields
        )
    with pytest.raises(ValueError, match=r"must divide num_generations = 7.*'enabled': false"):
        ReplayGRPOConfig(
            **settings(
                tmp_path, scale_rewards="none", num_generations=7, per_device_train_batch_size=14
            ),
            **fields,
        )


def test_replay_metrics_reach_trl_logs(tmp_path: Path):
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=4),
        replay_method="uniform",
        replay_knobs={"capacity": 64, "replay_ratio": 2, "zero_variance": {"enabled": False}},
    )
    trainer = build(config)
    trainer.train()
    logged = trainer.state.log_history[-2]
    for key in (
        "replay/buffer/size",
        "replay/age_mean",
        "replay/age_max",
        "replay/reuse_mean",
        "replay/tokens_generated",
        "replay/tokens_trained",
        "replay/mu",
    ):
        assert key in logged, key
    assert logged["replay/buffer/size"] == 32
    assert logged["replay/rollouts_trained"] == 2 * logged["replay/rollouts_generated"]
    # the method's signals: TRL's own learner statistics, one record per optimizer step
    assert logged["replay/signals/steps"] == trainer.state.global_step
    assert logged["replay/signals/rounds"] == logged["replay/rounds"]
    assert np.isfinite(logged["replay/signals/entropy"])
    assert trainer.pipeline.signals.mu is not None  # set from the meter at the last round
    assert np.isfinite(trainer.pipeline.signals.step["entropy"])


def test_zero_variance_slots_are_logged(tmp_path: Path):
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=4),
        replay_knobs={"zero_variance": {"enabled": True}},
    )
    trainer = build(config)
    trainer.train()
    assert "replay/zero_variance/slots_filled" in trainer.state.log_history[-2]


# ---------------------------------------------------------------------- checkpoints
def table_digest(trainer: Any) -> str:
    _meta, arrays = trainer.pipeline.method.table.state()
    h = hashlib.sha256()
    for key in sorted(arrays):
        h.update(np.ascontiguousarray(arrays[key]).tobytes())
    return h.hexdigest()


def test_resume_from_checkpoint_continues_exactly(tmp_path: Path):
    knobs = {"replay_method": "uniform", "replay_knobs": {"capacity": 64, "replay_ratio": 2}}
    save = {"save_strategy": "steps", "save_steps": 2}
    whole = build(
        ReplayGRPOConfig(**settings(tmp_path / "whole", max_steps=6, **save), **knobs),
    )
    _, whole_weights = trained(whole)
    first = build(
        ReplayGRPOConfig(**settings(tmp_path / "parts", max_steps=4, **save), **knobs),
    )
    first.train()
    state = tmp_path / "parts" / "out" / "checkpoint-4" / ReplayGRPOTrainer.state_dir
    assert (state / "replay_state.json").is_file()
    assert not [p for p in state.rglob("*") if p.suffix in (".pkl", ".pt", ".pth", ".pickle")]
    resumed = build(
        ReplayGRPOConfig(**settings(tmp_path / "parts", max_steps=6, **save), **knobs),
    )
    resumed.train(resume_from_checkpoint=True)
    assert resumed.rounds == whole.rounds == 3
    assert table_digest(resumed) == table_digest(whole)
    assert resumed.meter.counts["rollouts_trained"] == whole.meter.counts["rollouts_trained"]
    for name, value in whole_weights.items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, rtol=0, atol=1e-6)


def test_a_round_whose_rewards_trl_never_gathered_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Every round checks that TRL gathered its rewards, not only the first: a later round would
    otherwise be stored with the previous round's rewards."""
    trainer = build(ReplayGRPOConfig(**settings(tmp_path, max_steps=3)))
    rounds = {"n": 0}
    ours, trls = ReplayGRPOTrainer._calculate_rewards, GRPOTrainer._calculate_rewards

    def first_round_only(self: Any, *args: Any) -> Any:
        rounds["n"] += 1
        return (ours if rounds["n"] == 1 else trls)(self, *args)

    monkeypatch.setattr(ReplayGRPOTrainer, "_calculate_rewards", first_round_only)
    with pytest.raises(RuntimeError, match="without calling _calculate_rewards"):
        trainer.train()
    assert rounds["n"] == 2


def test_resume_refuses_a_checkpoint_without_replay_state(tmp_path: Path):
    plain = build(
        GRPOConfig(**settings(tmp_path, max_steps=2, save_strategy="steps", save_steps=2)),
        GRPOTrainer,
    )
    plain.train()
    ours = build(ReplayGRPOConfig(**settings(tmp_path, max_steps=4)))
    with pytest.raises(FileNotFoundError, match="no llm-replay state"):
        ours.train(resume_from_checkpoint=True)


def test_rows_stored_without_behaviour_log_probs_never_reach_a_run_that_reads_them(
    tmp_path: Path,
):
    """AsymRE without KL-Cov stores zeros for the behaviour (nothing reads it); a resume or an
    init_from that turns KL-Cov on would read them as a policy certain of every token."""
    asymre = {"replay_method": "positive", "replay_loss": "asymre"}
    plain = {**settings(tmp_path, scale_rewards="none", save_strategy="steps", save_steps=4)}
    first = build(ReplayGRPOConfig(**{**plain, "max_steps": 4}, **asymre))
    first.train()
    assert not first._needs_behaviour
    table = first.pipeline.method.table
    rows, _ = table.get_batch(table.storage.keys_of(table.storage.live_in_order()))
    assert rows.behaviour_logprobs.size >= 64 and not np.any(rows.behaviour_logprobs)
    kl_cov = {"replay_token_control": {"mode": "kl_cov", "rows": "replayed"}}
    resumed = build(ReplayGRPOConfig(**{**plain, "max_steps": 6}, **asymre, **kl_cov))
    with pytest.raises(ValueError, match=r"stored no behaviour log-probs.*replay_token_control"):
        resumed.train(resume_from_checkpoint=True)
    # a checkpoint from before the flag: the restored rows themselves are read
    state_file = (
        tmp_path / "out" / "checkpoint-4" / ReplayGRPOTrainer.state_dir / "replay_state.json"
    )
    state = json.loads(state_file.read_text())
    del state["behaviour_stored"]
    state_file.write_text(json.dumps(state))
    resumed = build(ReplayGRPOConfig(**{**plain, "max_steps": 6}, **asymre, **kl_cov))
    with pytest.raises(ValueError, match=r"resumed under replay_token_control.*every stored"):
        resumed.train(resume_from_checkpoint=True)
    saved = table.save(tmp_path / "zeros")
    knobs = {"replay_knobs": {"init_from": str(saved)}}
    with pytest.raises(ValueError, match=r"replay_knobs\.init_from = .*every stored behaviour"):
        build(
            ReplayGRPOConfig(
                **settings(tmp_path, scale_rewards="none"), **asymre, **kl_cov, **knobs
            )
        )
    # the same table is fine where nothing reads the behaviour
    build(ReplayGRPOConfig(**settings(tmp_path, scale_rewards="none"), **asymre, **knobs))


# ---------------------------------------------------------------------- config errors
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"replay_method": "nope"}, "replay_method = 'nope': choose one of"),
        ({"replay_method": "positive", "replay_knobs": {"delta": 2}}, "delta"),
        ({"replay_method": "uniform", "replay_knobs": {"delta": 0.5}}, "replay_knobs.delta"),
        ({"replay_knobs": "{not json"}, "replay_knobs: not valid JSON"),
        ({"replay_knobs": {"method": "uniform"}}, "replay_knobs.method"),
        ({"replay_loss": "ppo"}, "replay_loss = 'ppo'"),
        ({"replay_loss": "asymre"}, "scale_rewards = 'group'"),
        ({"num_iterations": 2}, "num_iterations = 2"),
        ({"replay_correct_threshold": float("nan")}, "replay_correct_threshold"),
        ({"replay_method": "auto"}, "replay_loss = 'trl': replay_method 'auto'"),
    ],
)
def test_bad_replay_fields_are_named(tmp_path: Path, fields: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("{", r"\{")):
        ReplayGRPOConfig(**settings(tmp_path), **fields)


def test_methods_that_restart_from_the_base_model_are_refused(tmp_path: Path):
    config = ReplayGRPOConfig(
        **settings(tmp_path), replay_method="rlep", replay_knobs={"phase1_iterations": 2}
    )
    with pytest.raises(ValueError, match="restarts from the base model"):
        build(config)


def test_knobs_from_the_command_line_are_json(tmp_path: Path):
    config = ReplayGRPOConfig(
        **settings(tmp_path), replay_method="uniform", replay_knobs='{"capacity": 96}'
    )
    assert config.replay.settings.capacity == 96  # type: ignore[attr-defined]
    assert json.loads(config.to_json_string())["replay_method"] == "uniform"


def test_with_vllm_correction_replayed_batches_carry_a_unit_sampling_ratio(tmp_path: Path):
    """With vLLM the stored behaviour is the engine's log-probs, so TRL's separate
    engine-vs-trainer correction must be 1 on drawn rows (vLLM itself cannot run here)."""
    config = ReplayGRPOConfig(
        **settings(tmp_path), replay_method="uniform", replay_knobs={"capacity": 64}
    )
    trainer = build(config)
    trainer.train()
    table = trainer.pipeline.method.table
    sample = table.sample(16)
    assert "importance_sampling_ratio" not in trainer._micro_batch(sample)
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    inputs = trainer._micro_batch(sample)
    assert torch.equal(
        inputs["importance_sampling_ratio"], torch.ones_like(inputs["completion_mask"]).float()
    )


def test_the_replay_controller_reads_a_learner_statistic_under_trl(tmp_path: Path):
    """TRL reports the clipped-token fraction; over a zero threshold only it can press (the
    entropy and plateau readings are off), and the scale falls."""
    knobs = {"capacity": 64, "replay_ratio": 3, "zero_variance": {"enabled": False}}
    knobs["anneal"] = {
        "enabled": True,
        "window": 3,
        "start": 0.0,
        "entropy_floor": 0.0,
        "min_gain": 0.0,
        "clip_max": 1e-9,
    }
    config = ReplayGRPOConfig(
        **settings(tmp_path, max_steps=12, learning_rate=5e-3),
        replay_method="uniform",
        replay_knobs=knobs,
    )
    trainer = build(config)
    trainer.train()
    signals = trainer.pipeline.signals
    assert signals.mean("clip_fraction") is not None
    logged = trainer.state.log_history[-2]
    assert logged["replay/anneal/pressed_clip"] >= 1
    assert logged["replay/anneal/scale"] < 1.0
    assert signals.progress == pytest.approx(trainer.state.global_step / 12, abs=0.1)


def test_an_anneal_reading_trl_cannot_feed_is_said_to_stay_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    knobs = {"anneal": {"enabled": True, "mode": "signals"}}
    with caplog.at_level("WARNING"):
        ReplayGRPOConfig(**settings(tmp_path, replay_method="positive", replay_knobs=knobs))
    assert "m2 reading (m2_max)" in caplog.text and "will not press" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        ReplayGRPOConfig(**settings(tmp_path, replay_method="positive"))
    assert "m2 reading" not in caplog.text
