"""Typed, validated run configuration: YAML files plus `--set dotted.key=value` overrides.

Every section is a dataclass; `load_config` checks each key against its field type and range and
fails at load time with the dotted key (`replay.capacity = -1: must be finite and > 0`). Unknown keys are
errors, with a suggestion when the spelling is close. Values given with `--set` are parsed as YAML
scalars (`--set optim.lr=1e-4 --set eval.pass_k=[1,4]`). Derived quantities are properties.
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from llm_replay.algorithms.head_gate import HeadGate
from llm_replay.algorithms.losses import LOSSES, Loss, LossConfig, loss_class
from llm_replay.algorithms.token_control import TokenControl, TokenControlError
from llm_replay.config import recipes
from llm_replay.config.combinations import (
    check_mixture,
    check_preference,
    check_sequence_regression,
    round_shape_warning,
)
from llm_replay.config.files import find_config, read_layered
from llm_replay.config.mixture import ReplayTasksConfig
from llm_replay.config.parse import (
    ConfigError,
    build,
    check_positive,
    check_registry_knobs,
    deep_copy,
    did_you_mean,
    field_names,
    parse_override,
    setting,
)
from llm_replay.config.preference import PreferenceConfig
from llm_replay.config.reward_model import RewardModelConfig, check_reward_model_use
from llm_replay.config.runtimes import RUNTIMES
from llm_replay.config.sections import (
    EvalConfig,
    GenerationConfig,
    LogConfig,
    ModelConfig,
    OptimConfig,
    TaskConfig,
    TrainConfig,
)
from llm_replay.config.steps import resolve_steps
from llm_replay.config.workers import WorkersConfig
from llm_replay.methods import (
    METHODS,
    OPTIONS,
    MethodConfig,
    MethodContext,
    OptionConfig,
    ReplayMethod,
    method_class,
)

__all__ = [
    "AlgorithmConfig",
    "Config",
    "ConfigError",
    "EvalConfig",
    "GenerationConfig",
    "LogConfig",
    "ModelConfig",
    "OptimConfig",
    "PreferenceConfig",
    "ReplayConfig",
    "RewardModelConfig",
    "TaskConfig",
    "TrainConfig",
    "WorkersConfig",
    "config_from_dict",
    "load_config",
]

log = logging.getLogger(__name__)
_WARNED: set[str] = set()  # warnings given once a process (`Config.check`)

ADAPTIVE_REFUSED = {  # methods that need every prompt's full group, and why
    "rlep": "its pool keeps groups with min_correct successes, and stopping a prompt at its "
    "first success rarely leaves two",
    "compute_optimal": "it sizes its table and ratio on rounds of prompts_per_step × group_size",
}

CONTROL_FIELDS = {  # TokenControl's knob → its setting under algorithm:
    "mode": "token_control",
    "rows": "control_rows",
    "fraction": "control_fraction",
    "coef": "control_coef",
    "low": "control_low",
    "high": "control_high",
}


@dataclass
class AlgorithmConfig:
    """`algorithm:` — the advantage estimator, the loss with its knobs, aggregation, regularisers.

    The knobs of the chosen loss sit directly under `algorithm`, as a method's do under `replay`
    (`algorithm.loss: cispo` with `algorithm.clip_high: 0.28`); they come from the loss registry
    (`llm-replay losses`), and a knob of another loss is refused by name.
    """

    advantage: Literal["grpo", "dr_grpo", "rloo", "optimal"] = setting(
        "grpo",
        "group advantage: grpo (R − mean)/std, dr_grpo R − mean, rloo leave-one-out, optimal "
        "R − 0.5·log mean exp(2R) (OAPL's)",
    )
    loss: str = setting("grpo", "the policy loss (`llm-replay losses`); its knobs sit beside it")
    loss_settings: LossConfig = setting(
        help="the chosen loss's knobs (set flat under algorithm:)",
        factory=lambda: loss_class("grpo").Config(),
    )
    aggregation: Literal["token_mean", "sequence_mean", "token_sum_norm"] = setting(
        "token_mean", "how per-token losses become one number"
    )
    kl_coef: float = setting(0.0, "weight of the k3 KL to the initial weights")
    entropy_coef: float = setting(0.0, "weight of an entropy bonus")
    use_sampling_weights: bool = setting(
        False, "weight each row by its sampler importance weight (prioritized replay)"
    )
    token_control: Literal["off", "clip_cov", "kl_cov"] = setting(
        "off",
        "treat the high-covariance tokens of control_rows (arXiv 2505.22617): clip_cov stops the "
        "gradient of a random share in (control_low, control_high), kl_cov adds "
        "control_coef·|log π − log π_behav| to the top share",
    )
    control_rows: Literal["replayed", "all"] = setting(
        "replayed", "whose tokens token_control and positive_weight treat"
    )
    control_fraction: float = setting(2e-4, "share of control_rows' tokens treated, in (0, 1]")
    control_coef: float = setting(1.0, "kl_cov's β")
    control_low: float = setting(1.0, "clip_cov: lower bound of the covariance band")
    control_high: float = setting(5.0, "clip_cov: upper bound of the covariance band")
    positive_weight: float = setting(
        1.0,
        "λ on control_rows' positive-advantage rows (W-REINFORCE, arXiv 2506.01347, uses 0.1): "
        "successes pull less, failures push with full weight",
    )
    head_gate: float = setting(
        0.0,
        "DGG (arXiv 2605.19425): skip a step whose output-layer gradient norm exceeds this × "
        "the running mean of admitted steps' norms; 0: off (sync runtime)",
    )
    head_gate_warmup: int = setting(10, "steps admitted before the gate may refuse one")

    def reads_behaviour(self) -> bool:
        """Whether training reads the stored behaviour log-probs: the loss's ratio, or KL-Cov's
        term against the behaviour policy."""
        return loss_class(self.loss).reads_behaviour or self.token_controls().reads_behaviour

    def token_controls(self) -> TokenControl:
        return TokenControl(
            mode=self.token_control,
            fraction=self.control_fraction,
            coef=self.control_coef,
            low=self.control_low,
            high=self.control_high,
            rows=self.control_rows,
            positive_weight=self.positive_weight,
        )

    def check(self) -> None:
        loss = loss_class(self.loss)
        required = loss.advantage
        if required is not None and self.advantage != required:
            raise ConfigError(
                f"advantage = {self.advantage!r}: loss {self.loss!r} needs {required!r}"
                + (" (R − V̂ baselines)" if required == "dr_grpo" else "")
            )
        if loss.aggregation is not None and self.aggregation != loss.aggregation:
            raise ConfigError(
                f"aggregation = {self.aggregation!r}: loss {self.loss!r} is one value per rollout "
                f"given to each of its tokens; set {loss.aggregation!r} so that every rollout "
                "weighs the same"
            )
        check_positive("kl_coef", self.kl_coef, zero_ok=True)
        check_positive("entropy_coef", self.entropy_coef, zero_ok=True)
        try:
            HeadGate(self.head_gate, self.head_gate_warmup)
        except ValueError as error:  # its message starts with the setting's own name
            raise ConfigError(str(error)) from None
        try:
            self.token_controls()
        except TokenControlError as error:  # its message starts with the knob's own name
            name, _, rest = str(error).partition(" = ")
            field = CONTROL_FIELDS.get(name, name)
            raise ConfigError(f"{field} = {rest}".replace(" high (", " control_high (")) from None

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
            raise ConfigError(
                f"{prefix}.loss = {name!r}: choose one of {sorted(LOSSES)}"
                + did_you_mean(name, LOSSES)
            )
        general = field_names(cls) - {"loss", "loss_settings"}
        knobs = {k: v for k, v in data.items() if k != "loss" and k not in general}
        knobs_of = {n: field_names(c.Config) for n, c in LOSSES.items()}
        check_registry_knobs(
            prefix, knobs, chosen=name, kind="loss", knobs_of=knobs_of, also=general | {"loss"}
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
class ReplayConfig:
    """`replay:` — the method's name, its knobs (from the registry) and the method options.

    The knobs of the chosen method sit directly under `replay` (`replay.capacity`,
    `replay.delta`); each registered option has a mapping of its own (`replay.<option>.enabled`).
    """

    method: str = setting(
        "on_policy", "the replay method, or a recipe (`auto`: the recommended default)"
    )
    settings: MethodConfig = setting(
        help="the method's knobs (set flat under replay:)",
        factory=lambda: method_class("on_policy").Config(),
    )
    options: dict[str, OptionConfig] = setting(
        help="the method options (replay.<option>:)", factory=dict
    )
    init_from: str | None = setting(
        None, "a saved or durable table to start from (reuse across runs)"
    )
    tasks: ReplayTasksConfig = setting(
        help="per-task table parts on a mixture (replay.tasks.balance, .capacity)",
        factory=ReplayTasksConfig,
    )

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

    def knob_reading(self, statistic: str) -> str | None:
        """The `option.knob` of an enabled option that reads `statistic` of the learner's step
        (`OptionConfig.learner_readings`), or None: e.g. "anneal.guard" for "replay_cosine"."""
        for name, option in self.enabled_options():
            for read, knob, _ in option.learner_readings():
                if read == statistic:
                    return f"{name}.{knob}" if knob is not None else name
        return None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, **dataclasses.asdict(self.settings)}
        if self.init_from is not None:
            out["init_from"] = self.init_from
        if self.tasks.parts() is not None:
            out["tasks"] = dataclasses.asdict(self.tasks)
        for name, option in self.options.items():
            out[name] = dataclasses.asdict(option)
        return out

    @classmethod
    def from_mapping(cls, data: dict[str, Any], prefix: str) -> ReplayConfig:
        data = recipes.resolve_replay(data)
        name = data.get("method", "on_policy")
        if name not in METHODS:
            raise ConfigError(
                f"{prefix}.method = {name!r}: choose one of {sorted(METHODS)} "
                f"or a recipe: {sorted(recipes.RECIPES)}"
                + did_you_mean(name, [*METHODS, *recipes.RECIPES])
            )
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
            k: v
            for k, v in data.items()
            if k not in ("method", "init_from", "tasks") and k not in OPTIONS
        }
        knobs_of = {m: field_names(c.Config) for m, c in METHODS.items()}
        check_registry_knobs(
            prefix,
            knobs,
            chosen=name,
            kind="method",
            knobs_of=knobs_of,
            also=[*OPTIONS, "method", "init_from", "tasks"],
        )
        settings = build(method.Config, knobs, prefix)
        tasks = _task_parts(name, settings, data.get("tasks"), f"{prefix}.tasks")
        options: dict[str, OptionConfig] = {}
        for option_name, option in OPTIONS.items():
            built = build(option.Config, data.get(option_name) or {}, f"{prefix}.{option_name}")
            refusal = option.refusal(method)
            if built.enabled and refusal is not None:
                raise ConfigError(
                    f"{prefix}.{option_name}.enabled = true: not with method {name!r} ({refusal})"
                )
            options[option_name] = built
        scalers = [n for n, o in options.items() if o.enabled and OPTIONS[n].sets_replay_scale]
        if len(scalers) > 1:
            raise ConfigError(
                f"{prefix}: {' and '.join(f'{n}.enabled = true' for n in scalers)}: each sets "
                "the method's replay scale; enable one"
            )
        return cls(name, settings, options, init_from, tasks)


def _task_parts(method: str, settings: MethodConfig, data: Any, prefix: str) -> ReplayTasksConfig:
    """`replay.tasks`, refused by name where the method's table cannot take the parts."""
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{prefix} = {data!r}: expected a mapping {{balance, capacity}}")
    tasks: ReplayTasksConfig = build(ReplayTasksConfig, data or {}, prefix)
    parts = tasks.parts()
    if parts is None:
        return tasks
    cls = method_class(method)
    if cls.consumes_rollouts:
        raise ConfigError(
            f"{prefix}: not with method {method!r} (it trains each rollout once, in generation "
            "order: there is no stored table to balance)"
        )
    spec = cls.table_spec(settings, MethodContext(batch_size=1, rollouts_per_step=1))
    try:  # built only to ask the parts whether they fit the method's sampler
        dataclasses.replace(spec, tasks=parts).build()
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return tasks


@dataclass
class Config:
    name: str = setting("run", "the run's name ({name} in log.run_dir)")
    runtime: Literal["sync", "threaded", "ray"] = setting(
        "sync", "one process, generation workers in threads, or Ray actors (workers:)"
    )
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
    preference: PreferenceConfig = field(default_factory=PreferenceConfig)

    def check(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"name = {self.name!r}: must be a non-empty name without '/'")
        check_reward_model_use(
            self.task.reward,
            self.reward_model,
            stale_rewards="stale_rewards" in dict(self.replay.enabled_options()),
        )
        refusal = RUNTIMES[self.runtime].refusal(self)
        if refusal is not None:
            raise ConfigError(refusal)
        if self.task.kind == "mixture":
            check_mixture(self)
        if self.preference.enabled:
            check_preference(self)
        guard = self.replay.knob_reading("replay_cosine")
        if guard is not None and self.algorithm.token_controls().chooses_at_random:
            raise ConfigError(
                f"replay.{guard} = true: not with algorithm.token_control = 'clip_cov' (the "
                "guard trains a batch in pieces, and Clip-Cov's random pick would differ from "
                "the unsplit batch's; KL-Cov's choice is anchored on the whole batch)"
            )
        if loss_class(self.algorithm.loss).regresses_sequence:
            check_sequence_regression(self)
        adaptive_refusal = ADAPTIVE_REFUSED.get(self.replay.method)
        if self.generation.adaptive.enabled and adaptive_refusal:
            raise ConfigError(
                f"generation.adaptive.enabled: not with replay.method = {self.replay.method!r} "
                f"({adaptive_refusal})"
            )
        steps = self.train.steps_per_round
        if steps is not None and self.train.batch_size * steps != self.generation.rollouts_per_step:
            raise ConfigError(
                f"train.batch_size = {self.train.batch_size}: not the step train.steps_per_round "
                f"= {steps} makes of a round of {self.generation.rollouts_per_step} rollouts (a "
                "config read from a file or mapping has it set; one built in code sets it too)"
            )
        shape = round_shape_warning(self)
        if shape is not None and shape not in _WARNED:  # a config is built once a run, and again
            _WARNED.add(shape)
            log.warning("%s", shape)

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
    try:
        return typing.cast(Config, build(Config, resolve_steps(recipes.resolve(data))))
    except ConfigError as error:
        hint = recipes.recipe_hint(data, str(error))
        if not hint:
            raise
        raise ConfigError(f"{error}{hint}") from None


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a config (None: defaults), apply overrides, validate everything. `path` is a shipped
    preset's name (`auto`; `llm-replay presets` lists them) or a YAML file. A config may start
    from another with `extends: OTHER` (a preset name, or a file beside it): its mappings are
    merged over the other's, key by key, so a preset says only what it changes."""
    data: Any = {} if path is None else read_layered(find_config(path))
    return config_from_dict(data, overrides)
