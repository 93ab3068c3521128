"""Configs: every preset loads; bad keys and values fail with their dotted name."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.config import Config, ConfigError, config_from_dict, load_config
from llm_replay.config.files import PRESETS_DIR

PRESETS = sorted(PRESETS_DIR.glob("*.yaml"))


def test_every_method_and_option_has_a_preset() -> None:
    from llm_replay.methods import METHODS, OPTIONS

    configs = [load_config(p) for p in PRESETS]
    assert set(METHODS) <= {c.replay.method for c in configs}
    assert set(OPTIONS) <= {name for c in configs for name, _ in c.replay.enabled_options()}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_loads(path: Path) -> None:
    config = load_config(path)
    assert config.name == path.stem
    assert config.run_dir == Path("runs") / path.stem


def test_defaults_and_overrides() -> None:
    config = load_config(
        None, ["optim.lr=1e-4", "eval.pass_k=[1, 4]", "replay.method=rlep", "replay.min_correct=3"]
    )
    assert config.optim.lr == pytest.approx(1e-4)
    assert config.eval.pass_k == [1, 4] and config.eval.pass_samples == 4
    assert config.replay.settings.min_correct == 3
    assert isinstance(Config().generation.rollouts_per_step, int)


def test_off_on_yes_no_are_words_not_booleans(tmp_path: Path) -> None:
    """YAML 1.2's booleans: a choice spelled `off` stays the choice, in a file and in --set."""
    assert load_config("auto_kl_cov", ["algorithm.token_control=off"]).algorithm.token_control == (
        "off"
    )
    written = tmp_path / "run.yaml"
    written.write_text("extends: auto_kl_cov\nalgorithm:\n  token_control: off\n")
    assert load_config(str(written)).algorithm.token_control == "off"
    with pytest.raises(ConfigError, match=r"algorithm\.token_control = 'no': choose one of"):
        load_config(None, ["algorithm.token_control=no"])
    assert load_config(None, ["generation.dynamic_sampling=true"]).generation.dynamic_sampling


OAPL = ["algorithm.loss=oapl", "algorithm.advantage=optimal", "algorithm.aggregation=sequence_mean"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["replay.capcity=5"], "unknown key 'replay.capcity'; did you mean 'replay.capacity'"),
        (
            ["replay.method=uniform", "replay.capacity=-1"],
            r"replay\.capacity = -1: must be finite and > 0",
        ),
        (
            ["replay.method=positive", "replay.delta=2"],
            r"replay\.delta = 2\.0: must be in \[0, 1\]",
        ),
        (
            ["replay.method=rlep", "replay.rlep_x=1"],
            r"unknown key 'replay\.rlep_x'",
        ),
        (["optim.lr=fast"], r"optim\.lr = 'fast': expected a number"),
        (["replay.method=lifo"], r"replay\.method = 'lifo': choose one of"),
        (["generation.group_size=1"], r"generation\.group_size = 1: must be >= 2"),
        (["generation.top_p=1.5"], r"generation\.top_p = 1\.5"),
        (
            ["algorithm.loss=asymre"],
            r"algorithm\.advantage = 'grpo': loss 'asymre' needs 'dr_grpo'",
        ),
        (
            ["algorithm.loss=oapl", "algorithm.advantage=optimal"],
            r"algorithm\.aggregation = 'token_mean': loss 'oapl' is one value per rollout",
        ),
        (
            [*OAPL, "generation.top_k=5"],
            r"algorithm\.loss = 'oapl': not with generation\.top_k/top_p truncation",
        ),
        (
            [*OAPL, "algorithm.token_control=clip_cov"],
            r"algorithm\.token_control = 'clip_cov': not with algorithm\.loss = 'oapl'",
        ),
        (
            [*OAPL, "replay.method=positive", "replay.balance.enabled=true"],
            r"replay\.balance: not with algorithm\.loss = 'oapl', which regresses onto",
        ),
        (["eval.pass_k=[0]"], r"eval\.pass_k = \[0\]"),
        (["algorithm.token_control=cov"], r"algorithm\.token_control = 'cov'"),
        (["algorithm.control_fraction=0"], r"algorithm\.control_fraction = 0\.0: must be in"),
        (["algorithm.control_low=5"], r"algorithm\.control_low = 5\.0: must be below"),
        (["algorithm.positive_weight=-1"], r"algorithm\.positive_weight = -1\.0: must be"),
        (["train.iterations=2.5"], r"train\.iterations = 2\.5: expected an integer"),
        (["log.tensorboard=maybe"], r"log\.tensorboard = 'maybe': expected true or false"),
        (["task.kind=dataset"], r"task\.path = None: kind 'dataset' needs"),
        (["model=3"], r"model = 3: expected a mapping"),
        (["noequals"], "expected dotted.key=value"),
        (
            ["replay.replay_ratio=2"],
            r"replay\.replay_ratio: a knob of \[.*'uniform'.*\], not of method 'on_policy'",
        ),
    ],
)
def test_bad_values_name_the_dotted_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no preset of that name .* and no file .*missing\.yaml"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml")


def test_round_trip_through_dict() -> None:
    config = load_config(PRESETS[0])
    assert config_from_dict(config.to_dict()) == config


def test_a_loss_takes_its_own_knobs_beside_it_and_refuses_another_losses() -> None:
    config = load_config(None, ["algorithm.loss=cispo", "algorithm.clip_high=0.5"])
    assert config.algorithm.build_loss().clip_epsilons() == (1.0, 0.5)
    assert config.to_dict()["algorithm"] == {
        "advantage": "grpo",
        "loss": "cispo",
        "clip_low": None,
        "clip_high": 0.5,
        "aggregation": "token_mean",
        "kl_coef": 0.0,
        "entropy_coef": 0.0,
        "use_sampling_weights": False,
        "token_control": "off",
        "control_rows": "replayed",
        "control_fraction": 2e-4,
        "control_coef": 1.0,
        "control_low": 1.0,
        "control_high": 5.0,
        "positive_weight": 1.0,
        "head_gate": 0.0,
        "head_gate_warmup": 10,
    }
    assert config_from_dict(config.to_dict()).algorithm == config.algorithm
    with pytest.raises(
        ConfigError, match=r"^algorithm\.tis_cap: a knob of \['tis'\], not of loss 'grpo'"
    ):
        load_config(None, ["algorithm.tis_cap=3"])
    with pytest.raises(ConfigError, match=r"did you mean 'algorithm\.shaping_beta'"):
        load_config(None, ["algorithm.loss=exgrpo", "algorithm.shaping_bta=0.2"])
    with pytest.raises(ConfigError, match=r"^algorithm\.icepop_beta = 0\.5: must be > 1"):
        load_config(None, ["algorithm.loss=icepop", "algorithm.icepop_beta=0.5"])
    with pytest.raises(ConfigError, match=r"^algorithm\.advantage = 'grpo': loss 'asymre' needs"):
        load_config(None, ["algorithm.loss=asymre"])
