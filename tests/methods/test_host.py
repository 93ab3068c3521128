"""The replay host: built from the run's shape, asked capabilities not names, fed per round and
per step, saved atomically; what a front end no longer writes itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import load_config
from llm_replay.methods import ReplayPipeline
from llm_replay.methods.host import ReplayHost, RunShape, replays_stored_rows
from tests.conftest import make_batch

SHAPE = RunShape(batch_size=16, rollouts_per_step=16, group_size=4, seed=3, advantage="dr_grpo")


def host_for(preset: str, *overrides: str) -> ReplayHost:
    replay = load_config(preset, list(overrides)).replay
    return ReplayHost.build(replay.method, replay.settings, replay.options, SHAPE)


def test_the_context_comes_from_the_runs_shape() -> None:
    host = host_for("positive")
    context = host.context
    assert (context.batch_size, context.rollouts_per_step, context.group_size) == (16, 16, 4)
    assert (context.seed, context.advantage) == (3, "dr_grpo")
    assert host.signals is context.signals


@pytest.mark.parametrize(
    ("preset", "overrides", "replays"),
    [
        ("on_policy", (), False),
        ("on_policy", ("replay.zero_variance.enabled=true",), True),  # it replays stored groups
        ("positive", (), True),
        ("uniform", (), True),
    ],
)
def test_replaying_stored_rows_is_a_capability_not_a_name(
    preset: str, overrides: tuple[str, ...], replays: bool
) -> None:
    host = host_for(preset, *overrides)
    assert host.replays_stored_rows is replays
    assert host.reads_behaviour(ratio=True) is replays
    replay = load_config(preset, list(overrides)).replay
    assert replays_stored_rows(replay.method, replay.options) is replays


@pytest.mark.parametrize(
    ("preset", "ratio", "control", "carries", "reads"),
    [
        ("on_policy", True, False, False, False),  # every row trained once before the weights move
        ("on_policy", True, False, True, True),  # adaptive rounds carry rows past a step
        ("on_policy", False, True, False, True),  # KL-Cov's term reads them, ratio or not
        ("positive", False, False, True, False),  # AsymRE: no ratio reads them
        ("positive", True, False, False, True),  # a replayed row's ratio
    ],
)
def test_one_rule_says_who_reads_the_behaviour_log_probs(
    preset: str, ratio: bool, control: bool, carries: bool, reads: bool
) -> None:
    host = host_for(preset)
    assert host.reads_behaviour(ratio=ratio, control=control, carries_rows=carries) is reads


def test_following_the_runs_length_and_restarting_are_capabilities() -> None:
    assert host_for("auto").follows_progress  # the anneal schedule
    assert not host_for("positive_bandit").follows_progress
    rlep = host_for("rlep")
    assert rlep.restarts
    with pytest.raises(
        ValueError, match=r"^replay_method = 'rlep': this method restarts .* which X"
    ):
        rlep.refuse_restarts("replay_method", "rlep", "X")
    host_for("positive").refuse_restarts("replay_method", "positive", "X")  # nothing to refuse


def test_a_round_sets_the_signals_and_yields_the_pipelines_batches(
    rng: np.random.Generator,
) -> None:
    host = host_for("positive")
    twin = host_for("positive").pipeline
    fresh = make_batch(rng, 16, group_size=4)
    got = list(host.round(fresh, policy_version=2, mu=0.4, progress=0.25))
    assert (host.signals.mu, host.signals.progress, host.signals.policy_version) == (0.4, 0.25, 2)
    twin.set_policy_version(2)
    expected = list(twin.batches(fresh))
    assert [s.keys.tolist() for s in got] == [s.keys.tolist() for s in expected]
    host.after_step(got[0], {"loss/clip_fraction": 0.5}, policy_version=3)
    assert host.signals.policy_version == 3 and host.signals.step["clip_fraction"] == 0.5


def test_save_and_load_round_trip_atomically(rng: np.random.Generator, tmp_path: Path) -> None:
    host = host_for("positive")
    list(host.round(make_batch(rng, 16, group_size=4), policy_version=0))
    target = tmp_path / "state"
    host.save(target, {"rounds": 7})
    size = host.pipeline.method.table.size

    def fail(_: Path) -> None:
        raise OSError("disk full")

    list(host.round(make_batch(rng, 16, group_size=4, first_group=4), policy_version=1))
    with pytest.raises(OSError, match="disk full"):
        host.save(target, {"rounds": 8}, also=fail)
    again = host_for("positive")
    assert again.load(target) == {"method": "positive", "rounds": 7}  # the first save stands
    assert again.pipeline.method.table.size == size
    with pytest.raises(ValueError, match="saved by method 'positive', not 'uniform'"):
        host_for("uniform").load(target)
    with pytest.raises(FileNotFoundError, match="not a saved replay host"):
        again.load(tmp_path / "nothing")


def test_the_pipeline_is_what_the_front_ends_drove_before() -> None:
    assert isinstance(host_for("positive").pipeline, ReplayPipeline)


def test_the_groups_a_methods_tables_hold_are_named(rng: np.random.Generator) -> None:
    host = host_for("uniform", "replay.capacity=16")
    assert host.stored_groups() == set()
    list(host.round(make_batch(rng, 16, first_group=3)))  # groups 3..6
    list(host.round(make_batch(rng, 8, first_group=7)))  # 7, 8: the oldest two leave (capacity)
    assert host.stored_groups() == {5, 6, 7, 8}
    assert host_for("on_policy").stored_groups() == set()  # the queue stores nothing
