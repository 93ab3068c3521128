"""The registry: every method and option listed, described and run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_replay.cli import main
from llm_replay.config import ConfigError, load_config
from llm_replay.config.recipes import RECIPES
from llm_replay.methods import METHODS, OPTIONS, describe
from llm_replay.metrics import read_log
from llm_replay.runtime import build_trainer
from tests.conftest import tiny_config

ASYNC = sorted(name for name, cls in METHODS.items() if cls.async_refusal(cls.Config()) is None)
OPTION_RUNS = [
    (option, next(m for m in sorted(METHODS) if cls.refusal(METHODS[m]) is None))
    for option, cls in sorted(OPTIONS.items())
]
NEEDS = {  # what an option needs of the run beside its method
    "stale_rewards": (
        "task.reward=model",
        "reward_model.path=builtin:tiny-chain-sum-reward",
        "reward_model.refresh_every=1",
        "reward_model.refresh_steps=2",
    ),
}
SYNC_ONLY = {"stale_rewards": "does not carry a reward model"}  # and the refusal that says so


def test_methods_json_lists_every_method_and_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["methods", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    recipes = [e for e in entries if e["kind"] == "recipe"]
    assert [e["name"] for e in recipes] == list(RECIPES)  # recipes first: where to start
    entries = entries[len(recipes) :]
    assert [e["name"] for e in entries] == [*sorted(METHODS), *sorted(OPTIONS)]
    for entry in recipes:
        assert entry["paper"] and entry["description"]
        parts = {k["name"]: k["default"] for k in entry["knobs"]}
        assert parts["replay.method"] in METHODS
    for entry in entries:
        assert {"name", "paper", "supports_async", "knobs", "description"} <= set(entry)
        assert entry["paper"] and entry["description"]
        for knob in entry["knobs"]:
            assert {"name", "default", "help"} <= set(knob) and knob["help"]
    assert {e["name"]: e["supports_async"] for e in entries}["rlep"] is False


def test_methods_table_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in [*METHODS, *RECIPES]:
        assert name in out


def test_the_listing_matches_what_the_loader_accepts() -> None:
    for entry in describe():
        if entry["kind"] != "method":
            continue
        sets = [f"replay.method={entry['name']}"]
        sets += [f"replay.{k['name']}={json.dumps(k['default'])}" for k in entry["knobs"]]
        config = load_config(None, sets)
        assert config.replay.method == entry["name"]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_trains_end_to_end_sync(method: str, tmp_path: Path) -> None:
    config = tiny_config(None, tmp_path, f"replay.method={method}", "train.iterations=3")
    summary = build_trainer(config).run()
    assert summary["method"] == method and summary["iterations"] == 3 and summary["steps"] >= 3


@pytest.mark.parametrize("method", ASYNC)
def test_every_async_method_trains_end_to_end_threaded(method: str, tmp_path: Path) -> None:
    config = tiny_config(
        None,
        tmp_path,
        f"replay.method={method}",
        "runtime=threaded",
        "train.iterations=3",
        "workers.count=1",
    )
    summary = build_trainer(config).run()
    assert summary["iterations"] == 3 and summary["steps"] >= 3
    assert summary["async"]["async/workers_alive"] == 1  # counted live, before shutdown


@pytest.mark.parametrize(("option", "method"), OPTION_RUNS)
def test_every_option_trains_end_to_end(option: str, method: str, tmp_path: Path) -> None:
    config = tiny_config(
        None,
        tmp_path,
        f"replay.method={method}",
        f"replay.{option}.enabled=true",
        "train.iterations=3",
        *NEEDS.get(option, ()),
    )
    summary = build_trainer(config).run()
    assert summary["iterations"] == 3


def test_refused_async_methods_fail_at_load_time_naming_the_method() -> None:
    refused = sorted(set(METHODS) - set(ASYNC))
    for method in refused:
        with pytest.raises(ConfigError, match=rf"replay\.method = '{method}': runtime=threaded"):
            load_config(None, [f"replay.method={method}", "runtime=threaded"])


@pytest.mark.parametrize(("option", "method"), OPTION_RUNS)
def test_every_option_runs_threaded_logs_its_metrics_and_resumes(
    option: str, method: str, tmp_path: Path
) -> None:
    """With an option on, the method runs in "rounds" mode: the learner applies the option to
    each round, logs its metrics, and checkpoints its state."""
    sets = [
        f"replay.method={method}",
        f"replay.{option}.enabled=true",
        "runtime=threaded",
        "workers.count=1",
        *NEEDS.get(option, ()),
    ]
    if option in SYNC_ONLY:
        with pytest.raises(ConfigError, match=SYNC_ONLY[option]):
            tiny_config(None, tmp_path, *sets)
        return
    build_trainer(tiny_config(None, tmp_path, *sets, "train.iterations=2")).run()
    train = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    assert len(train) == 2
    assert all(any(key.startswith(f"{option}/") for key in record) for record in train)
    assert list(tmp_path.glob(f"checkpoint/**/options/{option}"))
    resumed = build_trainer(tiny_config(None, tmp_path, *sets, "train.iterations=3"))
    assert resumed.run(resume=True)["iterations"] == 3
