"""Typed, validated run configuration: YAML files plus `--set dotted.key=value` overrides.

Every section is a dataclass; `load_config` checks each key against its field type and range and
fails at load time with the dotted key (`replay.capacity = -1: must be finite and > 0`). Unknown keys are
errors, with a suggestion when the spelling is close. Values given with `--set` are parsed as YAML
scalars (`--set optim.lr=1e-4 --set eval.pass_k=[1,4]`). Derived quantities are properties.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from llm_replay.algorithms.losses import LOSSES, Loss, LossConfig, loss_class
from llm_replay.config.parse import (
    ConfigError,
    build,
    check_positive,
    check_registry_knobs,
    deep_copy,
    field_names,
    parse_override,
    yaml_error,
)
from llm_replay.config.prompts import PromptSkipConfig
from llm_replay.config.reward_model import RewardModelConfig, check_reward_model_use
from llm_replay.config.workers import WorkersConfig
from llm_replay.methods import (
    METHODS,
    OPTIONS,
    MethodConfig,
    OptionConfig,
    ReplayMethod,
    method_class,
)
from llm_replay.methods.pipeline import async_mode

__all__ = [
    "AlgorithmConfig",
    "Config",
    "ConfigError",
    "EvalConfig",
    "GenerationConfig",
    "LogConfig",
    "ModelConfig",
    "OptimConfig",
    "ReplayConfig",
    "RewardModelConfig",
    "TaskConfig",
    "TrainConfig",
    "WorkersConfig",
    "config_from_dict",
    "load_config",
]


def _check_basis(key: str, basis: str) -> None:
    valid = basis in ("measured", "rollouts")
    if basis.startswith("mu_"):
        try:
            valid = float(basis[3:]) > 0
        except ValueError:
            valid = False
    if not valid:
        raise ConfigError(f"{key} = {basis!r}: choose measured, rollouts or mu_<number>, e.g. mu_5")


@dataclass
class ModelConfig:
    path: str = "builtin:tiny-chain-sum"
    device: str = "cpu"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    chat_template: Literal["auto", "on", "off"] = "auto"

    def check(self) -> None:
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device = {self.device!r}: use 'cpu', 'cuda' or 'cuda:N'")


REWARDS = ("score", "binary", "model")
"""`task.reward`: the task's own score, 1/0 by whether it reaches `correct_threshold`, or a
learned reward model's (`reward_model:`; the task's score stays the evaluation metric)."""


@dataclass
class TaskConfig:
    kind: Literal["reasoning_gym", "dataset"] = "reasoning_gym"
    dataset: str = "chain_sum"
    params: dict[str, Any] = field(
        default_factory=lambda: {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
    )
    prompt_template: str = "{expression}="
    strip_spaces: bool = True
    seed: int = 1
    eval_seed: int = 2
    train_size: int = 20_000
    eval_size: int = 500
    path: str | None = None
    eval_path: str | None = None
    eval_fraction: float = 0.1
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    correct_threshold: float = 1.0
    reward: str = "score"  # "binary": 1 where the score reaches correct_threshold; "model"
    reward_timeout_s: float = 5.0
    failure_reward: float = 0.0

    def check(self) -> None:
        if self.reward not in REWARDS:
            raise ConfigError(f"reward = {self.reward!r}: choose one of {REWARDS}")
        if self.kind == "dataset" and not self.path:
            raise ConfigError("path = None: kind 'dataset' needs a .jsonl or .parquet file")
        for key in ("train_size", "eval_size"):
            check_positive(key, getattr(self, key))
        check_positive("reward_timeout_s", self.reward_timeout_s)
        if not 0.0 < self.eval_fraction < 1.0:
            raise ConfigError(
                f"eval_fraction = {self.eval_fraction!r}: must be in (0, 1) (the share of the "
                "problem space held out for eval)"
            )


@dataclass
class GenerationConfig:
    prompts_per_step: int = 32
    group_size: int = 8
    max_new_tokens: int = 8
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    dynamic_sampling: bool = False
    dynamic_sampling_rounds: int = 3
    skip: PromptSkipConfig = field(default_factory=PromptSkipConfig)

    def check(self) -> None:
        check_positive("prompts_per_step", self.prompts_per_step)
        check_positive("dynamic_sampling_rounds", self.dynamic_sampling_rounds, zero_ok=True)
        if self.group_size < 2:
            raise ConfigError(f"group_size = {self.group_size}: must be >= 2 (group baselines)")
        check_positive("max_new_tokens", self.max_new_tokens)
        check_positive("temperature", self.temperature)
        check_positive("top_k", self.top_k, zero_ok=True)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p = {self.top_p!r}: must be in (0, 1]")

    @property
    def rollouts_per_step(self) -> int:
        return self.prompts_per_step * self.group_size


@dataclass
class AlgorithmConfig:
    """`algorithm:` — the advantage estimator, the loss with its knobs, aggregation, regularisers.

    The knobs of the chosen loss sit directly under `algorithm`, as a method's do under `replay`
    (`algorithm.loss: cispo` with `algorithm.clip_high: 0.28`); they come from the loss registry
    (`llm-replay losses`), and a knob of another loss is refused by name.
    """

    advantage: Literal["grpo", "dr_grpo", "rloo"] = "grpo"
    loss: str = "grpo"
    loss_settings: LossConfig = field(default_factory=lambda: loss_class("grpo").Config())
    aggregation: Literal["token_mean", "sequence_mean", "token_sum_norm"] = "token_mean"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    use_sampling_weights: bool = False

    def check(self) -> None:
        required = loss_class(self.loss).advantage
        if required is not None and self.advantage != required:
            raise ConfigError(
                f"advantage = {self.advantage!r}: loss {self.loss!r} needs {required!r}"
                + (" (R − V̂ baselines)" if required == "dr_grpo" else "")
            )
        check_positive("kl_coef", self.kl_coef, zero_ok=True)
        check_positive("entropy_coef", self.entropy_coef, zero_ok=True)

    def build_loss(self) -> Loss:
        return loss_class(self.loss)(self.loss_settings)

    def to_dict(self) -> dict[str, Any]:
        """The fields in order, the chosen loss's knobs flat in place of `loss_settings`."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "loss_settings":
                out.update(dataclasses.asdict(self.loss_settings))
            else:
                out[f.name] = getattr(self, f.name)
        return out

    @classmethod
    def from_mapping(cls, data: dict[str, Any], prefix: str) -> AlgorithmConfig:
        name = data.get("loss", "grpo")
        if name not in LOSSES:
            raise ConfigError(f"{prefix}.loss = {name!r}: choose one of {sorted(LOSSES)}")
        general = field_names(cls) - {"loss", "loss_settings"}
        knobs = {k: v for k, v in data.items() if k != "loss" and k not in general}
        knobs_of = {n: field_names(c.Config) for n, c in LOSSES.items()}
        check_registry_knobs(
            prefix, knobs, chosen=name, kind="loss", knobs_of=knobs_of, also=general
        )
        settings = build(LOSSES[name].Config, knobs, prefix)
        general_part: AlgorithmConfig = build(
            cls, {k: v for k, v in data.items() if k in general}, prefix
        )
        instance = dataclasses.replace(general_part, loss=name, loss_settings=settings)
        try:
            instance.check()
        except ConfigError as error:
            raise ConfigError(f"{prefix}.{error}") from None
        return instance


@dataclass
class OptimConfig:
    lr: float = 5e-5
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0

    def check(self) -> None:
        check_positive("lr", self.lr)
        check_positive("weight_decay", self.weight_decay, zero_ok=True)
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"{key} = {getattr(self, key)!r}: must be in [0, 1)")
        check_positive("grad_clip", self.grad_clip, zero_ok=True)


@dataclass
class ReplayConfig:
    """`replay:` — the method's name, its knobs (from the registry) and the method options.

    The knobs of the chosen method sit directly under `replay` (`replay.capacity`,
    `replay.delta`); each registered option has a mapping of its own (`replay.<option>.enabled`).
    """

    method: str = "on_policy"
    settings: MethodConfig = field(default_factory=lambda: method_class("on_policy").Config())
    options: dict[str, OptionConfig] = field(default_factory=dict)
    init_from: str | None = None  # a saved or durable table to start from (reuse across runs)

    def __post_init__(self) -> None:
        for name, option in OPTIONS.items():
            self.options.setdefault(name, option.Config())

    @property
    def method_class(self) -> type[ReplayMethod[Any]]:
        return method_class(self.method)

    @property
    def samples_per_insert(self) -> float:
        """Rollouts drawn per rollout added: y, or exactly 1 for the on-policy queue."""
        return self.settings.samples_per_insert

    def enabled_options(self) -> list[tuple[str, OptionConfig]]:
        return [(name, option) for name, option in self.options.items() if option.enabled]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, **dataclasses.asdict(self.settings)}
        if self.init_from is not None:
            out["init_from"] = self.init_from
        for name, option in self.options.items():
            out[name] = dataclasses.asdict(option)
        return out

    @classmethod
    def from_mapping(cls, data: dict[str, Any], prefix: str) -> ReplayConfig:
        name = data.get("method", "on_policy")
        if name not in METHODS:
            raise ConfigError(f"{prefix}.method = {name!r}: choose one of {sorted(METHODS)}")
        method = METHODS[name]
        init_from = data.get("init_from")
        if init_from is not None:
            if not isinstance(init_from, str) or not Path(init_from).is_dir():
                raise ConfigError(
                    f"{prefix}.init_from = {init_from!r}: not a table directory "
                    "(ReplayTable.save or ReplayTable.open)"
                )
            if method.preload_refusal is not None:
                raise ConfigError(
                    f"{prefix}.init_from: not with method {name!r} ({method.preload_refusal})"
                )
        knobs = {
            k: v for k, v in data.items() if k not in ("method", "init_from") and k not in OPTIONS
        }
        knobs_of = {m: field_names(c.Config) for m, c in METHODS.items()}
        check_registry_knobs(
            prefix, knobs, chosen=name, kind="method", knobs_of=knobs_of, also=OPTIONS
        )
        settings = build(method.Config, knobs, prefix)
        options: dict[str, OptionConfig] = {}
        for option_name, option in OPTIONS.items():
            built = build(option.Config, data.get(option_name) or {}, f"{prefix}.{option_name}")
            refusal = option.refusal(method)
            if built.enabled and refusal is not None:
                raise ConfigError(
                    f"{prefix}.{option_name}.enabled = true: not with method {name!r} ({refusal})"
                )
            options[option_name] = built
        return cls(name, settings, options, init_from)


@dataclass
class TrainConfig:
    iterations: int = 60
    compute_seconds: float | None = None
    compute_budget: float | None = None
    budget_basis: str = "measured"
    batch_size: int = 256
    micro_batch_size: int = 256
    seed: int = 0
    threads: int | None = None

    def check(self) -> None:
        check_positive("iterations", self.iterations)
        if self.compute_seconds is not None:
            check_positive("compute_seconds", self.compute_seconds)
        if self.compute_budget is not None:
            check_positive("compute_budget", self.compute_budget)
        _check_basis("budget_basis", self.budget_basis)
        check_positive("batch_size", self.batch_size)
        check_positive("micro_batch_size", self.micro_batch_size)
        if self.threads is not None:
            check_positive("threads", self.threads)


@dataclass
class EvalConfig:
    every: int = 10
    every_compute: float | None = None
    size: int = 500
    pass_k: list[int] = field(default_factory=lambda: [1, 8])
    pass_size: int = 100

    def check(self) -> None:
        check_positive("every", self.every)
        if self.every_compute is not None:
            check_positive("every_compute", self.every_compute)
        check_positive("size", self.size)
        check_positive("pass_size", self.pass_size, zero_ok=True)
        if not self.pass_k or any(k < 1 for k in self.pass_k):
            raise ConfigError(f"pass_k = {self.pass_k!r}: must be a non-empty list of k >= 1")

    @property
    def pass_samples(self) -> int:
        return max(self.pass_k)


@dataclass
class LogConfig:
    run_dir: str = "runs/{name}"
    tensorboard: bool = True
    checkpoint_every: int = 0
    progress: bool = True

    def check(self) -> None:
        check_positive("checkpoint_every", self.checkpoint_every, zero_ok=True)


@dataclass
class Config:
    name: str = "run"
    runtime: Literal["sync", "threaded", "ray"] = "sync"
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)

    def check(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"name = {self.name!r}: must be a non-empty name without '/'")
        check_reward_model_use(
            self.task.reward,
            self.runtime,
            self.reward_model,
            stale_rewards="stale_rewards" in dict(self.replay.enabled_options()),
        )
        self._check_shards(self.replay.method_class)
        if self.runtime != "sync":
            method = self.replay.method_class
            refusal = method.async_refusal(self.replay.settings)
            if refusal is not None:
                raise ConfigError(
                    f"replay.method = {self.replay.method!r}: runtime={self.runtime} cannot run "
                    f"it: {refusal}"
                )
            for key, on in (
                ("dynamic_sampling", self.generation.dynamic_sampling),
                ("skip.enabled", self.generation.skip.enabled),
            ):
                if on:
                    raise ConfigError(
                        f"generation.{key} = true: not supported by runtime={self.runtime}"
                    )
            table_mode = async_mode(method, bool(self.replay.enabled_options())) == "table"
            if self.replay.init_from is not None and table_mode:
                raise ConfigError(
                    f"replay.init_from: runtime={self.runtime} feeds method "
                    f"{self.replay.method!r}'s table from the workers directly, which does not "
                    "carry the source table's versions yet; start it in a sync run"
                )
            need = (
                self.replay.samples_per_insert * self.generation.rollouts_per_step
                + self.train.batch_size
            )
            buffer = self.workers.error_buffer
            mode = async_mode(method, bool(self.replay.enabled_options()))
            ratio_limited = mode == "table" and not method.consumes_rollouts
            if buffer is not None and ratio_limited and 2 * buffer < need:
                raise ConfigError(
                    f"workers.error_buffer = {buffer:g}: the band (2 × error_buffer) must hold "
                    f"replay_ratio × rollouts_per_step + batch_size = {need:g} rollouts, or a "
                    "blocked worker and a blocked learner could deadlock"
                )

    def _check_shards(self, method: type[ReplayMethod[Any]]) -> None:
        w = self.workers
        if not w.sharded:
            return
        field_name = "table_shards" if w.table_shards > 1 else "table_fsync"
        value = getattr(w, field_name)
        if self.runtime != "ray":
            raise ConfigError(
                f"workers.{field_name} = {value!r}: sharded and durable tables run under "
                f"runtime=ray (this run is runtime={self.runtime})"
            )
        mode = async_mode(method, bool(self.replay.enabled_options()))
        if mode != "table" or method.consumes_rollouts:
            what = "consumes each rollout once" if mode == "table" else "runs in rounds"
            raise ConfigError(
                f"workers.{field_name} = {value!r}: method {self.replay.method!r} {what} under "
                "runtime=ray; sharded and durable tables serve the methods whose table the "
                "workers fill at the replay ratio (uniform, positive)"
            )
        if not hasattr(self.replay.settings, "capacity"):
            raise ConfigError(
                f"workers.{field_name} = {value!r}: method {self.replay.method!r} has no "
                "replay.capacity to split across shards"
            )

    @property
    def run_dir(self) -> Path:
        return Path(self.log.run_dir.format(name=self.name))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["algorithm"] = self.algorithm.to_dict()
        out["replay"] = self.replay.to_dict()
        return out


def config_from_dict(data: dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> Config:
    data = deep_copy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: {part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return typing.cast(Config, build(Config, data))


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML file (None: defaults), apply overrides, validate everything."""
    data: Any = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: no such config file")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as error:
            raise ConfigError(f"{path}: not UTF-8 text (byte {error.start})") from None
        except yaml.YAMLError as error:
            raise ConfigError(yaml_error(path, error)) from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
    return config_from_dict(data, overrides)
