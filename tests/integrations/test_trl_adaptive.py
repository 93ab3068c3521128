"""AR3PO's adaptive rollouts inside ReplayGRPOTrainer: the stages go through TRL's own
generate-and-score, a solved prompt stops, an unsolved one gets its kept success, the meter
counts only what was generated, and a resumed run continues exactly."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from tests.integrations.test_trl import settings, table_digest, trained

from llm_replay.config import load_config
from llm_replay.integrations.trl import ReplayGRPOConfig, ReplayGRPOTrainer
from llm_replay.integrations.trl.runner import trl_arguments
from llm_replay.models import load_policy

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["1+1=", "2+3=", "4+4=", "6+1="]
FOUR = Dataset.from_dict({"prompt": PROMPTS})
ADAPTIVE = {"enabled": True, "stage_size": 2, "reuse": True}


def build(config: Any, reward: Any, dataset: Dataset = FOUR) -> ReplayGRPOTrainer:
    model, tokenizer = load_policy("builtin:tiny-chain-sum", device="cpu", dtype="float32")
    return ReplayGRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=dataset,
        processing_class=tokenizer,
    )  # fmt: skip


def adaptive_config(tmp_path: Path, **extra: Any) -> ReplayGRPOConfig:
    fields = {"per_device_train_batch_size": 32, "replay_adaptive": ADAPTIVE, **extra}
    return ReplayGRPOConfig(**settings(tmp_path, **fields))


class Scripted:
    """A reward function that records how many completions each prompt got per call: prompts in
    `solved` are always right, the others never, except that `first_right` makes the very first
    completion ever seen of every prompt right."""

    __name__ = "scripted"

    def __init__(self, solved: set[str], first_right: bool = False) -> None:
        self.solved, self.first_right = solved, first_right
        self.calls: list[Counter[str]] = []
        self.seen: set[str] = set()

    def __call__(self, prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        self.calls.append(Counter(prompts))
        out = []
        for p in prompts:
            first = self.first_right and p not in self.seen
            self.seen.add(p)
            out.append(float(p in self.solved or first))
        return out


def test_a_solved_prompt_stops_at_its_first_stage_and_the_meter_counts_what_was_made(tmp_path):
    reward = Scripted(solved={"1+1=", "4+4="})
    trainer = build(adaptive_config(tmp_path, max_steps=2), reward)
    trainer.train()
    # each round: 4 prompts × 2, then the 2 unsolved × 2 three more times (up to 8)
    per_round = [[2, 2, 2, 2], [2, 2], [2, 2], [2, 2]]
    assert [sorted(c.values()) for c in reward.calls] == per_round * trainer.rounds
    for later_stage in [c for i, c in enumerate(reward.calls) if i % 4]:
        assert set(later_stage) == {"2+3=", "6+1="}
    c, rounds = trainer.meter.counts, trainer.rounds
    assert c["rollouts_generated"] == rounds * (2 * 2 + 2 * 8)
    assert c["prompts_generated"] == rounds * 4  # a prompt is counted once, not once a stage
    # the on-policy queue trains micro-batches of 32 rows, as in the native loop: rounds of 20
    # rows are drawn as they come, so two steps take four rounds
    assert (rounds, c["rollouts_trained"]) == (4, 2 * 32)
    metrics = trainer.replay_metrics()
    assert metrics["replay/adaptive/rollouts_per_prompt"] == pytest.approx(5.0)
    assert metrics["replay/adaptive/unsolved"] == pytest.approx(0.5)
    assert metrics["replay/adaptive/stages"] == 4.0


def test_an_unsolved_prompt_trains_on_its_kept_success_with_whole_group_advantages(tmp_path):
    reward = Scripted(solved=set(), first_right=True)
    trainer = build(adaptive_config(tmp_path, max_steps=2), reward)
    rounds = []
    original = trainer._fresh_round

    def keep(generation_batch: Any) -> Any:
        rounds.append(original(generation_batch))
        return rounds[-1]

    trainer._fresh_round = keep
    trainer.train()
    first, second = rounds[:2]
    # round 1: each prompt's first completion is right, so every prompt stops after one stage
    assert len(first) == 4 * 2 and (first.rewards == 1.0).sum() == 4
    # round 2: nothing is right; every prompt runs all 4 stages and gets its round-1 success back
    assert len(second) == 4 * 8
    assert trainer.adaptive is not None and trainer.adaptive.totals["reused"] >= 4
    right = second.rewards == 1.0
    assert right.sum() == 4 and set(second.group_ids[right]) == set(second.group_ids)
    assert (second.policy_versions[right] == 0).all()
    # grpo over the group as it ends up (7 wrong, 1 right), not TRL's per-stage advantage
    std = np.sqrt(0.125 * 0.875)
    np.testing.assert_allclose(second.advantages[right], 0.875 / (std + 1e-6))
    np.testing.assert_allclose(second.advantages[~right], -0.125 / (std + 1e-6))
    for row in np.flatnonzero(right):  # the kept row is round 1's, behaviour log-probs included
        match = [
            i
            for i in np.flatnonzero(first.rewards == 1.0)
            if np.array_equal(first[i].prompt_ids, second[row].prompt_ids)
        ]
        assert len(match) == 1
        kept, reused = first[match[0]], second[row]
        np.testing.assert_array_equal(kept.completion_ids, reused.completion_ids)
        np.testing.assert_array_equal(kept.behaviour_logprobs, reused.behaviour_logprobs)
        assert np.isfinite(kept.behaviour_logprobs).all() and (kept.behaviour_logprobs < 0).all()
    # a reused row takes the place of a generated wrong one: what was generated is every row
    # of every round, the reused ones standing for the ones they replaced
    assert trainer.meter.counts["rollouts_generated"] == sum(len(r) for r in rounds)


def test_resume_with_adaptive_rollouts_continues_exactly(tmp_path: Path):
    """Four steps in one epoch (a resumed run re-draws an epoch's order only within an epoch),
    cut after two; the prompts repeat, so rounds after the cut reuse successes kept before it."""
    repeated = Dataset.from_dict({"prompt": PROMPTS * 4})
    save = {"save_strategy": "steps", "save_steps": 2}
    whole = build(
        adaptive_config(tmp_path / "whole", max_steps=4, **save), Scripted(set(), True), repeated
    )
    _, whole_weights = trained(whole)
    before_cut = Scripted(set(), True)
    first = build(adaptive_config(tmp_path / "parts", max_steps=2, **save), before_cut, repeated)
    first.train()
    state = (
        tmp_path
        / "parts"
        / "out"
        / "checkpoint-2"
        / ReplayGRPOTrainer.state_dir
        / "replay_state.json"
    )
    assert '"adaptive"' in state.read_text()
    after_cut = Scripted(set(), True)
    after_cut.seen = set(before_cut.seen)  # the reward's memory is the world's, not the trainer's
    resumed = build(adaptive_config(tmp_path / "parts", max_steps=4, **save), after_cut, repeated)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.adaptive is not None and whole.adaptive is not None
    assert resumed.adaptive.totals == whole.adaptive.totals
    assert resumed.adaptive.totals["reused"] > first.adaptive.totals["reused"]  # type: ignore[union-attr]
    assert table_digest(resumed) == table_digest(whole)
    for name, value in whole_weights.items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"replay_adaptive": {"enabled": True, "stage_size": 3}}, "must divide num_generations"),
        ({"replay_adaptive": {"enabled": True, "stage_size": 0}}, "replay_adaptive.stage_size"),
        (
            {"replay_adaptive": {"enabled": True, "stages": 2}},
            "unknown key 'replay_adaptive.stages",
        ),
        ({"replay_adaptive": "{nope"}, "replay_adaptive: not valid JSON"),
        ({"replay_adaptive": [1]}, "replay_adaptive = \\[1\\]: expected a mapping"),
        ({"replay_adaptive": ADAPTIVE, "scale_rewards": "batch"}, "scale_rewards = 'batch'"),
        ({"replay_adaptive": ADAPTIVE, "replay_method": "rlep"}, "not with replay_method = 'rlep'"),
        (
            {"replay_adaptive": ADAPTIVE, "gradient_accumulation_steps": 2},
            "steps_per_generation = 2: replay_adaptive needs 1",
        ),
    ],
)
def test_bad_adaptive_fields_are_named(tmp_path: Path, fields: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message):
        ReplayGRPOConfig(**settings(tmp_path), **fields)


def test_a_run_config_with_adaptive_rollouts_maps_onto_trl(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    args = trl_arguments(load_config("ar3po"), tmp_path)
    assert args.adaptive.enabled and args.adaptive.stage_size == 2 and args.adaptive.reuse
    assert not trl_arguments(load_config("on_policy"), tmp_path).adaptive.enabled


def test_rows_carry_behaviour_log_probs_even_without_reuse(tmp_path: Path) -> None:
    """Rounds of any size: the on-policy queue carries a round's last rows into the next step,
    after the weights moved, so their ratio needs the log-probs they were sampled with."""
    no_reuse = {"enabled": True, "stage_size": 2, "reuse": False}
    trainer = build(adaptive_config(tmp_path, replay_adaptive=no_reuse), Scripted(set()))
    assert trainer._needs_behaviour
    plain = build(ReplayGRPOConfig(**settings(tmp_path / "plain")), Scripted(set()))
    assert not plain._needs_behaviour  # TRL's own shortcut, where every row trains at once


def test_gradient_accumulation_with_one_generation_per_micro_step(tmp_path: Path) -> None:
    reward = Scripted(solved={"1+1=", "4+4="})
    config = adaptive_config(
        tmp_path, max_steps=2, per_device_train_batch_size=16, gradient_accumulation_steps=2,
        steps_per_generation=1,
    )  # fmt: skip
    trainer = build(config, reward, Dataset.from_dict({"prompt": PROMPTS * 4}))
    trainer.train()
    c = trainer.meter.counts
    assert trainer.state.global_step == 2 and c["rollouts_trained"] == 2 * 2 * 16
    assert c["prompts_generated"] == 2 * trainer.rounds  # 2 prompts a generation batch
    assert 2 * c["prompts_generated"] <= c["rollouts_generated"] < 8 * c["prompts_generated"]
