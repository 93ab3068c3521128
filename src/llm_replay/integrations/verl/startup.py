"""Start-up checks on verl's config: what would make a first run fail or silently differ.

verl builds the sampler in `PPOTrainer.__init__`, before any worker starts, and the sampler runs
every check in `CHECKS` on verl's whole config there; each problem names the setting and the fix,
and all of them are raised together. Three kinds:

- a replayed batch would be trained wrongly (the loss, the estimator, the off-policy correction);
- verl would fail later, after minutes of start-up (the rollout's parallel layout against its
  GPUs, which verl asserts only inside the workers; flash-attention without `flash_attn`);
- verl would silently not do what the setting says, because a custom sampler and the
  `llm_replay` estimator take its place (the KL penalty in the reward, DAPO's group filter, the
  failed-group refill, GRPO's std switch) or because verl would multiply the method's reuse
  (`ppo_epochs`).

Simplifications: a key missing from an older verl config skips the check that reads it (a
missing data or pipeline parallel size counts as 1); `flash_attn` is looked up in the process
that builds the trainer (verl's driver), which on one machine is the workers' environment; the
rollout's layout is read as verl 0.9.1 reads it (tensor × data × pipeline parallel GPUs a
replica), prefill/decode disaggregation left out.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from llm_replay.algorithms.losses import LOSSES, Loss
from llm_replay.config.recipes import RECIPES
from llm_replay.frontend.settings import lookup
from llm_replay.methods.host import reads_measured_mu

PREFIX = "sampler_kwargs"  # as errors name the sampler's knobs (settings.py)
KWARGS = f"trainer.v1.sampler.{PREFIX}"  # as an override sets one
FLASH = "flash_attention_2"  # verl's attention when override_config names none (model.py)
FSDP = (None, "fsdp", "fsdp2")  # the strategies that load the Hugging Face model with it


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


@dataclass(frozen=True)
class TrainerMode:
    """One of verl's v1 trainers (`trainer.v1.trainer_mode`), as the sampler meets it."""

    name: str
    waits_for_rollouts: bool  # a step waits for its own rollouts, so μ can be measured (sync)
    asynchronous: bool  # verl builds ReplayBufferAsync: the sampler is AsyncReplaySampler
    standalone_rollout: bool  # generation on a pool of its own (`rollout.nnodes` × GPUs)

    def refusals(self, method: str, settings: Any) -> Iterator[str]:
        """What a method cannot have in this mode: the measured μ where a step does not wait
        for its rollouts (generation overlaps training, and nothing measures it)."""
        if not self.waits_for_rollouts and reads_measured_mu(method, settings):
            yield (
                f"sampler_kwargs.mu: method {method!r} decides from the measured μ, and in verl's "
                f"{self.name} mode generation overlaps training, so the trainer cannot measure "
                "it; give the μ to plan for (generation cost per rollout ÷ training cost per row "
                "on your hardware)"
            )


MODES = {
    mode.name: mode
    for mode in (
        TrainerMode("sync", waits_for_rollouts=True, asynchronous=False, standalone_rollout=False),
        TrainerMode("colocate_async", False, asynchronous=True, standalone_rollout=False),
        TrainerMode("separate_async", False, asynchronous=True, standalone_rollout=True),
    )
}


def mode_named(name: Any) -> TrainerMode:
    """verl's `trainer.v1.trainer_mode` as its object, or a refusal naming the modes run."""
    mode = MODES.get(str(name))
    if mode is None:
        raise ValueError(
            f"trainer.v1.trainer_mode = {name!r}: llm-replay's sampler runs verl's "
            f"{tuple(MODES)} trainers"
        )
    return mode


@dataclass(frozen=True)
class VerlRun:
    """What a check reads: verl's whole config and what the sampler settled on."""

    root: Any
    replays: bool  # the method trains rows after the weights that generated them moved
    advantage: str  # sampler_kwargs.advantage, resolved
    recipe: str | None  # the recipe sampler_kwargs.method named

    def get(self, dotted: str) -> Any:
        return lookup(self.root, dotted)

    @property
    def loss_mode(self) -> str:
        return str(self.get("actor_rollout_ref.actor.policy_loss.loss_mode") or "")

    @property
    def our_loss(self) -> type[Loss] | None:
        """The llm-replay loss `loss_mode` names (`llm_replay_<name>`), None for verl's own."""
        mode = self.loss_mode
        return (
            LOSSES.get(mode.removeprefix("llm_replay_")) if mode.startswith("llm_replay_") else None
        )


Check = Callable[[VerlRun], Iterator[str]]


# ---------------------------------------------------------------- a replayed batch trained right


def loss_is_the_recipes(run: VerlRun) -> Iterator[str]:
    loss = None if run.recipe is None else RECIPES[run.recipe].loss
    mode = run.loss_mode
    if loss is not None and mode != f"llm_replay_{loss}":
        yield (
            f"actor_rollout_ref.actor.policy_loss.loss_mode = {mode or None!r}: {PREFIX}.method "
            f"{run.recipe!r} was measured with the {loss} loss; set it to 'llm_replay_{loss}'"
        )


def loss_gets_its_advantages(run: VerlRun) -> Iterator[str]:
    loss = run.our_loss
    needed = None if loss is None else loss.advantage
    if needed is not None and needed != run.advantage:
        yield f"{PREFIX}.advantage = {run.advantage!r}: loss_mode {run.loss_mode} expects {needed!r} advantages"


VERL_AGGREGATION = {"sequence_mean": "seq-mean-token-mean", "token_mean": "token-mean"}


def sequence_regression_is_set_up(run: VerlRun) -> Iterator[str]:
    """A loss that regresses a rollout's summed log-ratio onto its advantage (`oapl`): verl must
    average it per rollout, take the ratio against the policy that generated the row, sample
    without truncation, and leave the advantage unweighted (it is the regression's target)."""
    loss, mode = run.our_loss, run.loss_mode
    if loss is None or not loss.regresses_sequence:
        return
    wanted = VERL_AGGREGATION.get(loss.aggregation or "")
    given = run.get("actor_rollout_ref.actor.loss_agg_mode")
    if wanted is not None and str(given or "token-mean") != wanted:
        yield (
            f"actor_rollout_ref.actor.loss_agg_mode = {given!r}: loss_mode {mode} is one value "
            f"per rollout given to each of its tokens; set it to {wanted!r}"
        )
    if not run.get("algorithm.rollout_correction.bypass_mode"):
        yield (
            f"algorithm.rollout_correction.bypass_mode: loss_mode {mode} regresses the log-ratio "
            "against the policy that generated each row, which verl's old_log_prob is only in "
            "bypass mode (an importance weight would also multiply a squared loss); set it to true"
        )
    top_k = _count(run.get("actor_rollout_ref.rollout.top_k"))
    top_p = run.get("actor_rollout_ref.rollout.top_p")
    if (top_k is not None and top_k > 0) or (top_p is not None and float(top_p) < 1):
        yield (
            f"actor_rollout_ref.rollout.top_k/top_p: loss_mode {mode} sums each rollout's "
            "log-ratio, and a token sampled from a truncated distribution would dominate it; "
            "sample with top_k = -1 and top_p = 1"
        )
    if run.get(f"{KWARGS}.sampling_weights"):
        yield (
            f"{PREFIX}.sampling_weights = True: loss_mode {mode} regresses onto the advantage, "
            "so scaling it would move the target instead of weighting the row; leave it false"
        )


def estimator_is_ours(run: VerlRun) -> Iterator[str]:
    estimator = run.get("algorithm.adv_estimator")
    if estimator is not None and str(estimator) != "llm_replay":
        yield (
            f"algorithm.adv_estimator = {estimator!r}: set it to 'llm_replay' so verl trains on "
            "the advantages the method decided (a replayed row alone in its group would get 0 "
            "from GRPO)"
        )


def replayed_rows_keep_log_probs(run: VerlRun) -> Iterator[str]:
    if run.replays and run.get("actor_rollout_ref.rollout.calculate_log_probs") is False:
        yield (
            "actor_rollout_ref.rollout.calculate_log_probs = False: replayed rows need the "
            "log-probs of the policy that generated them (rollout_log_probs)"
        )


def replayed_rows_are_corrected(run: VerlRun) -> Iterator[str]:
    correction = run.get("algorithm.rollout_correction")
    corrected = correction is not None and (
        lookup(correction, "bypass_mode") or lookup(correction, "rollout_is")
    )
    if run.replays and not corrected:
        yield (
            "algorithm.rollout_correction: a replayed row was generated by an older policy; set "
            "bypass_mode=true (the ratio is taken against the stored rollout_log_probs) or "
            "rollout_is=token|sequence (importance weights against them)"
        )


# ---------------------------------------------------------------- a first run that starts


def rollout_fits_its_gpus(run: VerlRun) -> Iterator[str]:
    """verl's actor-rollout worker asserts its world size divides into replicas of TP × DP × PP
    GPUs (`ActorRolloutRefWorker.init_model`); the colocated rollout's world is the trainer's
    pool, `trainer.n_gpus_per_node × nnodes`. `separate_async` adds a standalone pool of
    `rollout.n_gpus_per_node × nnodes` (`gpus // replica` replicas, the rest idle) and, with
    `actor_rollout_ref.hybrid_engine=false`, has no rollout on the trainer's GPUs at all."""
    rollout = "actor_rollout_ref.rollout"
    tp = _count(run.get(f"{rollout}.tensor_model_parallel_size"))
    if tp is None:
        return
    dp = _count(run.get(f"{rollout}.data_parallel_size")) or 1
    pp = _count(run.get(f"{rollout}.pipeline_model_parallel_size")) or 1
    replica = tp * dp * pp
    mode = MODES.get(str(run.get("trainer.v1.trainer_mode")))
    separate = mode is not None and mode.standalone_rollout
    pools = []
    if not separate or run.get("actor_rollout_ref.hybrid_engine") is not False:
        pools.append(("trainer", "the rollout shares with the actor"))
    if separate:
        pools.append((rollout, "of the standalone rollout"))
    for prefix, role in pools:
        nodes, per_node = (_count(run.get(f"{prefix}.{k}")) for k in ("nnodes", "n_gpus_per_node"))
        if nodes is None or per_node is None or nodes * per_node < 1:
            continue  # verl refuses a missing or empty pool itself
        gpus = nodes * per_node
        if gpus % replica:
            if prefix != rollout:
                outcome = "verl's worker fails on it only once the workers have started"
            elif gpus < replica:
                outcome = "verl would start no rollout replica at all"
            else:
                outcome = f"verl would start {gpus // replica} replica(s) and leave the rest idle"
            yield (
                f"{rollout}.tensor_model_parallel_size = {tp}: a rollout replica takes tensor × "
                f"data × pipeline parallel = {tp} × {dp} × {pp} GPUs, which does not divide the "
                f"{gpus} GPU(s) {role} ({prefix}.n_gpus_per_node × {prefix}.nnodes), so "
                f"{outcome}; set {rollout}.tensor_model_parallel_size (verl's default is 2; 1 on "
                f"one GPU) and its data/pipeline_model_parallel_size so their product divides "
                f"{gpus}"
            )


def _attention(run: VerlRun, model: str, strategy: str) -> Iterator[str]:
    node = run.get(model)
    if node is None or run.get(strategy) not in FSDP:
        return
    implementation = lookup(node, "override_config.attn_implementation") or FLASH
    if implementation == FLASH and not flash_attn_installed():
        yield (
            f"{model}.override_config.attn_implementation = {implementation!r} (verl's default "
            f"when unset): loading the model needs the flash_attn package, which this "
            f"environment lacks; install flash-attn, or use PyTorch's attention with "
            f"++{model}.override_config.attn_implementation=sdpa and {model}.use_remove_padding="
            "false (remove-padding packs rows for flash-attn's variable-length kernel)"
        )


def actor_attention_loads(run: VerlRun) -> Iterator[str]:
    """The actor's, and the reference policy's, which loads the same model config."""
    yield from _attention(run, "actor_rollout_ref.model", "actor_rollout_ref.actor.strategy")


def critic_attention_loads(run: VerlRun) -> Iterator[str]:
    """Only with a critic: verl's `need_critic` (critic.enable, else the GAE estimator)."""
    enabled = run.get("critic.enable")
    critic = enabled if enabled is not None else run.get("algorithm.adv_estimator") == "gae"
    if critic:
        yield from _attention(run, "critic.model", "critic.strategy")


# ---------------------------------------------------------------- settings verl would not honour


def kl_penalty_reaches_the_loss(run: VerlRun) -> Iterator[str]:
    if run.get("algorithm.use_kl_in_reward"):
        yield (
            "algorithm.use_kl_in_reward = True: verl subtracts the KL penalty from "
            "token_level_rewards, which the llm_replay estimator does not read (it hands verl "
            "the advantages the method decided from rm_scores), so the penalty would be dropped "
            "silently; set it to false and put the KL in the actor's loss with "
            "actor_rollout_ref.actor.use_kl_loss=true (kl_loss_coef, kl_loss_type), which verl "
            "adds to any policy loss, on reference log-probs it computes for every trained row"
        )


def no_dapo_group_filter(run: VerlRun) -> Iterator[str]:
    if run.get("algorithm.filter_groups.enable"):
        yield (
            "algorithm.filter_groups.enable = True: verl does not hand DAPO's group filter to a "
            "custom sampler, so no group would be filtered (it would only force "
            "data.gen_batch_size to 1); set it to false, and let the method deal with groups "
            f"that all got one reward: ++{KWARGS}.zero_variance.enabled=true (on_policy, "
            "prioritized, rlep) fills their places with stored informative groups instead of "
            "generating more (`llm-replay methods`)"
        )


def no_failed_group_refill(run: VerlRun) -> Iterator[str]:
    if run.get("trainer.v1.sampler.sync_refill_failed_groups"):
        yield (
            "trainer.v1.sampler.sync_refill_failed_groups = True: verl does not pass it to a "
            "custom sampler (it would only force data.gen_batch_size to 1); llm-replay's keeps a "
            "failed group sampleable with the sessions it delivered and asks verl for more "
            "prompts itself when a step's batch falls short; set it to false"
        )


def std_normalisation_is_the_samplers(run: VerlRun) -> Iterator[str]:
    if run.get("algorithm.norm_adv_by_std_in_grpo") is False and run.advantage == "grpo":
        yield (
            "algorithm.norm_adv_by_std_in_grpo = False: only verl's GRPO estimator reads it; "
            f"the llm_replay estimator takes {PREFIX}.advantage = 'grpo', which divides by the "
            f"group's std; for advantages without it set ++{KWARGS}.advantage=dr_grpo (and leave "
            "this true)"
        )


def one_pass_over_each_row(run: VerlRun) -> Iterator[str]:
    epochs = _count(run.get("actor_rollout_ref.actor.ppo_epochs"))
    if epochs is not None and epochs > 1:
        yield (
            f"actor_rollout_ref.actor.ppo_epochs = {epochs}: verl would train every row of a "
            f"step {epochs} times, multiplying the method's replay ratio (and what it counts "
            "as spent) without the method knowing; set it to 1 and raise the method's own "
            f"reuse instead ({PREFIX}.replay_ratio where the method has one, "
            "`llm-replay methods`)"
        )


CHECKS: tuple[Check, ...] = (
    loss_is_the_recipes,
    loss_gets_its_advantages,
    sequence_regression_is_set_up,
    estimator_is_ours,
    replayed_rows_keep_log_probs,
    replayed_rows_are_corrected,
    rollout_fits_its_gpus,
    actor_attention_loads,
    critic_attention_loads,
    kl_penalty_reaches_the_loss,
    no_dapo_group_filter,
    no_failed_group_refill,
    std_normalisation_is_the_samplers,
    one_pass_over_each_row,
)


def startup_problems(
    root: Any, replays: bool, advantage: str = "grpo", recipe: str | None = None
) -> list[str]:
    """Every problem `CHECKS` finds in verl's config (`root`; None for a plain dict: none).
    `replays`: the method (or an option on it) trains rows after the weights that generated them
    moved (`methods.host.replays_stored_rows`), so it needs behaviour log-probs and a
    correction."""
    if root is None:
        return []
    run = VerlRun(root, replays, advantage, recipe)
    return [problem for check in CHECKS for problem in check(run)]
