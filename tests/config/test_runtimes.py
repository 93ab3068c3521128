"""The runtimes as objects: each says what it refuses, and `Config.check` raises the chosen
runtime's first refusal, naming its field."""

from __future__ import annotations

import typing

import pytest

from llm_replay.config import Config, ConfigError, load_config
from llm_replay.config.runtimes import RUNTIMES


def test_every_runtime_the_config_offers_is_an_object_and_only_those() -> None:
    choices = typing.get_args(typing.get_type_hints(Config)["runtime"])
    assert set(choices) == set(RUNTIMES)


@pytest.mark.parametrize(
    ("runtime", "overrides", "message"),
    [
        ("sync", ["workers.table_shards=2"], r"workers\.table_shards = 2: .*runtime=sync"),
        ("threaded", ["workers.table_shards=2"], r"workers\.table_shards = 2: .*runtime=threaded"),
        ("threaded", ["generation.dynamic_sampling=true"], r"generation\.dynamic_sampling"),
        ("ray", ["generation.skip.enabled=true"], r"generation\.skip\.enabled = true: .*ray"),
        ("threaded", ["algorithm.head_gate=0.9"], r"algorithm\.head_gate = 0\.9"),
        ("ray", ["workers.table_shards=2"], r"method 'on_policy' consumes each rollout once"),
    ],
)
def test_each_runtime_refuses_what_it_cannot_run_by_field(
    runtime: str, overrides: list[str], message: str
) -> None:
    base = load_config("on_policy")
    with pytest.raises(ConfigError, match=message):
        load_config("on_policy", [f"runtime={runtime}", *overrides])
    assert RUNTIMES[runtime].refusal(base) is None  # the plain preset runs everywhere


def test_a_preference_run_is_refused_by_the_asynchronous_runtimes() -> None:
    for runtime in ("threaded", "ray"):
        with pytest.raises(ConfigError, match=rf"preference\.enabled = true: runtime={runtime}"):
            load_config("dpo", [f"runtime={runtime}"])
    assert RUNTIMES["sync"].refusal(load_config("dpo")) is None


def test_each_runtime_names_the_trainer_that_runs_it() -> None:
    """`runtime.build_trainer` imports what the runtime object names, with no if-chain of its
    own; the sync runtime hands a preference run to the preference loop."""
    import importlib

    from llm_replay.runtime.loop import RunLoop

    plain, pairs = load_config("on_policy"), load_config("dpo")
    named = {RUNTIMES[r].trainer(plain) for r in RUNTIMES} | {RUNTIMES["sync"].trainer(pairs)}
    assert len(named) == 4
    for path in named:
        module, name = path.split(":")
        assert issubclass(getattr(importlib.import_module(module), name), RunLoop), path
    assert RUNTIMES["sync"].trainer(pairs).endswith(":PreferenceTrainer")
