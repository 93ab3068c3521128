"""AR3PO's adaptive rollout and response reuse: the stages and the reuse by hand on a scripted
generator, the checks on its knobs, and a run that pays only for what it generates and resumes
exactly."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_replay.config import ConfigError
from llm_replay.config.prompts import AdaptiveRolloutConfig
from llm_replay.data.batch import RolloutBatch
from llm_replay.generation import Generation, SamplingParams
from llm_replay.methods.host import ReplayHost
from llm_replay.metrics import ComputeMeter, read_log
from llm_replay.runtime import SyncTrainer, build_trainer
from llm_replay.runtime.adaptive_rollouts import AdaptiveRollouts
from llm_replay.runtime.rollouts import RolloutMaker
from tests.conftest import tiny_config
from tests.runtime.test_sync import run_full_and_cut, untimed_train_records

RIGHT, WRONG = 7, 8  # a completion is one token: 7 is scored right, 8 wrong


@dataclass
class ScriptedGenerator:
    """Prompt p's j-th completion ever sampled is `script[p][j]` (1 right, 0 wrong)."""

    script: dict[int, list[int]]
    policy_version: int = 0
    calls: list[tuple[list[int], int]] = field(default_factory=list)
    drawn: dict[int, int] = field(default_factory=dict)

    def generate(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams) -> Any:
        keys = [int(p[0]) for p in prompts]
        self.calls.append((keys, n))
        ids = []
        for key in keys:
            for _ in range(n):
                j = self.drawn.get(key, 0)
                self.drawn[key] = j + 1
                ids.append(RIGHT if self.script[key][j] else WRONG)
        rows = len(ids)
        return Generation(
            prompt_index=np.repeat(np.arange(len(prompts)), n),
            completion_ids=np.asarray(ids, np.int32),
            completion_lengths=np.ones(rows, np.int32),
            behaviour_logprobs=np.full(rows, -0.5 - self.policy_version, np.float32),
            entropies=np.full(rows, 0.25, np.float32),
            finish_reasons=("stop",) * rows,
            policy_version=self.policy_version,
            prompt_tokens=len(prompts),
            padded_tokens=0,
        )


class DigitTokenizer:
    def batch_decode(self, sequences: Any, skip_special_tokens: bool = True) -> list[str]:
        return ["right" if int(s[0]) == RIGHT else "wrong" for s in sequences]


@dataclass
class Counts:
    failures: int = 0


@dataclass
class ExactScorer:
    version: int = 0
    model_tokens: int = 0
    counts: Counts = field(default_factory=Counts)

    def score(self, texts: list[str], problems: list[Any], prompt_texts: Any = None) -> Any:
        return np.asarray([1.0 if t == "right" else 0.0 for t in texts])


def scripted_maker(script: dict[int, list[int]], group_size: int = 6) -> RolloutMaker:
    keys = sorted(script)
    return RolloutMaker(
        generator=ScriptedGenerator(script),  # type: ignore[arg-type]
        tokenizer=DigitTokenizer(),
        problems=[None] * len(keys),  # type: ignore[list-item]
        prompts=[[key, 1] for key in keys],
        scorer=ExactScorer(),  # type: ignore[arg-type]
        sampling=SamplingParams(max_new_tokens=1),
        group_size=group_size,
        advantage="grpo",
        correct_threshold=1.0,
    )


def test_stages_stop_a_prompt_at_its_first_correct_completion() -> None:
    """Group 6 in stages of 2. Prompt 0 is solved in stage 1 (2 rows), prompt 1 in stage 2 (4
    rows), prompt 2 never (6 rows, nothing kept to reuse): 12 rows generated, not 18."""
    maker = scripted_maker({0: [1, 0], 1: [0, 0, 0, 1], 2: [0] * 6})
    adaptive = AdaptiveRollouts(AdaptiveRolloutConfig(enabled=True, stage_size=2))
    meter = ComputeMeter()
    batch, metrics = maker.make(np.arange(3), 10, meter, adaptive)

    generator = maker.generator
    assert isinstance(generator, ScriptedGenerator)
    assert generator.calls == [([0, 1, 2], 2), ([1, 2], 2), ([2], 2)]
    assert batch.group_ids.tolist() == [10] * 2 + [11] * 4 + [12] * 6
    assert batch.rewards.tolist() == [1, 0] + [0, 0, 0, 1] + [0] * 6
    assert meter.counts["rollouts_generated"] == 12 and meter.counts["prompts_generated"] == 3
    assert metrics["adaptive/rollouts_per_prompt"] == 4.0
    assert metrics["adaptive/unsolved"] == pytest.approx(1 / 3)
    assert metrics["adaptive/stages"] == 3 and metrics["adaptive/reused"] == 0
    assert metrics["adaptive/first_stage_correct"] == pytest.approx(1 / 6)  # stage 1: 1 of 6
    # advantages within each group as generated: grpo of [1, 0] is [1, -1]
    assert batch.advantages[:2] == pytest.approx([1.0, -1.0], abs=1e-5)
    assert batch.advantages[6:] == pytest.approx([0.0] * 6)
    assert sorted(adaptive.kept) == ["0 1", "1 1"]  # prompts 0 and 1 keep a success


def test_an_unsolved_prompt_gets_its_latest_earlier_success_in_place_of_a_wrong_row() -> None:
    """Round 1 solves prompt 0 at policy version 0; in round 2 (version 3) it fails all 6: its
    last row becomes the kept success, sampled by version 0 and not charged as generation."""
    maker = scripted_maker({0: [0, 1] + [0] * 6})
    adaptive = AdaptiveRollouts(AdaptiveRolloutConfig(enabled=True, stage_size=2))
    meter = ComputeMeter()
    maker.make(np.arange(1), 0, meter, adaptive)
    generator = maker.generator
    assert isinstance(generator, ScriptedGenerator)
    generator.policy_version = 3
    batch, metrics = maker.make(np.arange(1), 1, meter, adaptive)

    assert len(batch) == 6 and batch.group_ids.tolist() == [1] * 6
    assert batch.rewards.tolist() == [0, 0, 0, 0, 0, 1]
    assert batch.policy_versions.tolist() == [3] * 5 + [0]
    reused = batch[5]
    assert reused.completion_ids.tolist() == [RIGHT]
    assert reused.behaviour_logprobs.tolist() == [-0.5]  # the log-prob version 0 sampled it with
    # grpo over [0,0,0,0,0,1]: mean 1/6, std sqrt(5)/6
    assert batch.advantages[5] == pytest.approx((5 / 6) / (np.sqrt(5) / 6), rel=1e-5)
    assert metrics["adaptive/reused"] == 1 and metrics["adaptive/reused_total"] == 1
    assert adaptive.reused_rows.tolist() == [False] * 5 + [True]  # what the watchers leave out
    assert metrics["reward/mean"] == 0.0  # the round's rewards are what it generated
    assert meter.counts["rollouts_generated"] == 2 + 6


def test_a_reused_row_keeps_its_prompts_task_on_a_mixture() -> None:
    """A mixture's rows carry their member; the kept success put in for an unsolved prompt
    carries it too (an untagged row is a task of its own to the per-task table parts: balanced
    draws gave those few old rows a fifth of every replayed batch)."""
    from llm_replay.tasks import TASK_TAG, Problem

    maker = scripted_maker({0: [0, 1] + [0] * 6})
    maker.problems = [Problem("p", "a", {TASK_TAG: "gcd"})]
    adaptive = AdaptiveRollouts(AdaptiveRolloutConfig(enabled=True, stage_size=2))
    maker.make(np.arange(1), 0, ComputeMeter(), adaptive)
    batch, metrics = maker.make(np.arange(1), 1, ComputeMeter(), adaptive)
    assert metrics["adaptive/reused"] == 1 and adaptive.reused_rows[-1]
    assert batch.tasks == ("gcd",) * 6


def test_no_reuse_when_switched_off_or_when_the_reward_has_moved_on() -> None:
    for reuse, version in ((False, 0), (True, 1)):
        maker = scripted_maker({0: [1, 0] + [0] * 6})
        adaptive = AdaptiveRollouts(AdaptiveRolloutConfig(enabled=True, stage_size=2, reuse=reuse))
        maker.make(np.arange(1), 0, ComputeMeter(), adaptive)
        scorer = maker.scorer
        assert isinstance(scorer, ExactScorer)
        scorer.version = version  # a refreshed reward model scores on another scale
        batch, metrics = maker.make(np.arange(1), 1, ComputeMeter(), adaptive)
        assert batch.rewards.tolist() == [0] * 6 and metrics["adaptive/reused"] == 0


def test_state_round_trips_through_json() -> None:
    maker = scripted_maker({0: [0, 1], 1: [1, 1]})
    adaptive = AdaptiveRollouts(AdaptiveRolloutConfig(enabled=True, stage_size=2))
    maker.make(np.arange(2), 0, ComputeMeter(), adaptive)
    restored = AdaptiveRollouts(AdaptiveRolloutConfig(enabled=True, stage_size=2))
    restored.load_state(json.loads(json.dumps(adaptive.state())))
    assert restored.kept == adaptive.kept and restored.totals == adaptive.totals
    with pytest.raises(ValueError, match="adaptive rollout state"):
        restored.load_state({"kept": {"0 1": [[7]]}, "totals": {}})


def test_adaptive_knobs_and_what_they_do_not_combine_with(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"generation\.adaptive\.stage_size = 3: must divide"):
        tiny_config(
            None, tmp_path, "generation.adaptive.enabled=true", "generation.adaptive.stage_size=3"
        )
    with pytest.raises(ConfigError, match=r"generation\.adaptive\.stage_size = 0"):
        tiny_config(None, tmp_path, "generation.adaptive.stage_size=0")
    on = "generation.adaptive.enabled=true"
    with pytest.raises(ConfigError, match="choose one"):
        tiny_config(None, tmp_path, on, "generation.dynamic_sampling=true")
    for method in ("on_policy", "auto"):  # a table of the workers', and rounds of whole items
        assert tiny_config(method, tmp_path, on, "runtime=threaded").generation.adaptive.enabled
    with pytest.raises(ConfigError, match="not with preference"):
        tiny_config("dpo", tmp_path, on)
    for method in ("rlep", "compute_optimal"):
        with pytest.raises(ConfigError, match=f"not with replay.method = '{method}'"):
            tiny_config(method, tmp_path, on)


ADAPTIVE = ("generation.adaptive.enabled=true", "generation.adaptive.stage_size=2")


def test_a_run_generates_fewer_rollouts_and_counts_only_those(tmp_path: Path) -> None:
    config = tiny_config("on_policy", tmp_path, "train.iterations=4", *ADAPTIVE)
    summary = SyncTrainer(config).run()
    log = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    per_round = [r["adaptive/rollouts_per_prompt"] for r in log]
    assert all(2 <= n <= 4 for n in per_round) and min(per_round) < 4
    generated = sum(n * config.generation.prompts_per_step for n in per_round)
    assert summary["counts"]["rollouts_generated"] == generated
    assert generated < 4 * config.generation.rollouts_per_step


def test_threaded_workers_sample_in_stages_each_with_its_own_cache(tmp_path: Path) -> None:
    config = tiny_config(
        "on_policy", tmp_path, "runtime=threaded", "train.iterations=4", "task.train_size=8",
        "workers.count=2", *ADAPTIVE,
    )  # fmt: skip
    trainer = build_trainer(config)
    summary = trainer.run()
    counts = summary["counts"]
    group = config.generation.group_size
    per_prompt = counts["rollouts_generated"] / counts["prompts_generated"]
    assert 2 <= per_prompt < group  # some prompts stopped after their first stage
    log = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    assert all(2 <= r["adaptive/rollouts_per_prompt"] <= group for r in log)
    assert not any("adaptive/reused_total" in r for r in log)  # no run totals from a worker
    caches = [w.adaptive for w in trainer.workers]
    assert all(c is not None for c in caches) and caches[0] is not caches[1]


def test_threaded_rounds_are_whole_work_items(tmp_path: Path, monkeypatch) -> None:
    """The suite's candidate (options on: the learner runs it in rounds) on two workers: each
    round the method composes is one work item, every prompt's group whole."""
    rounds: list[RolloutBatch] = []
    compose = ReplayHost.round

    def spy(self: ReplayHost, fresh: RolloutBatch, **kwargs: Any) -> Any:
        rounds.append(fresh)
        return compose(self, fresh, **kwargs)

    monkeypatch.setattr(ReplayHost, "round", spy)
    config = tiny_config(
        "auto_kl_cov_ar3po", tmp_path, "runtime=threaded", "train.iterations=4",
        "task.train_size=8", "workers.count=2",
    )  # fmt: skip
    build_trainer(config).run()
    prompts, group = config.generation.prompts_per_step, config.generation.group_size
    assert len(rounds) == 4
    sizes = []
    for fresh in rounds:
        groups, counts = np.unique(fresh.group_ids, return_counts=True)
        assert len(groups) == prompts and len(set(groups // prompts)) == 1  # one item
        assert all(2 <= c <= group and c % 2 == 0 for c in counts)  # whole stages of 2
        sizes.append(len(fresh))
    assert min(sizes) < prompts * group  # some prompts stopped early: rounds of varying size
    log = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    assert any(r.get("loss/cov_treated", 0) > 0 for r in log)  # KL-Cov on the replayed rows


def test_a_resumed_run_reuses_what_the_uninterrupted_one_does(tmp_path: Path) -> None:
    # 8 train prompts, 4 a round: every prompt comes back each epoch of two rounds, and rows are
    # reused after the resume at round 3 from successes kept before it
    run_full_and_cut("on_policy", tmp_path, *ADAPTIVE, "task.train_size=8")
    full = untimed_train_records(tmp_path / "full")
    assert untimed_train_records(tmp_path / "cut") == full
    assert sum(float(r["adaptive/reused"]) for r in full[3:]) > 0  # type: ignore[arg-type]
    state = json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())
    assert state["adaptive_rollouts"]["kept"]
