"""`ReplayOnlineDPOTrainer`: TRL's online DPO trainer with judged pairs kept and replayed.

TRL's `OnlineDPOTrainer` (`trl.experimental.online_dpo`) generates two completions a prompt,
scores them with its reward functions, calls the higher one chosen and trains DPO on the pair,
once. This subclass keeps each judged pair in llm-replay's pair table (`preference.replay`:
uniform, recency or margin-weighted draws, age eviction, checkpoints without pickle) and adds
`replay_pairs` stored pairs to every step's fresh ones, so an annotation is learned from more
than once. It wraps TRL and copies none of it; four methods are overridden, each calling
`super()`:

- `training_step` appends the replayed pairs' prompts to the step's, so TRL's batch B is
  fresh + replayed, and after TRL's step stores the fresh pairs it judged;
- `_generate` generates for the fresh prompts only and splices the stored pairs in TRL's layout
  (row i completion 1 of prompt i, row B + i completion 2): a stored chosen in the first half,
  its rejected in the second;
- `_calculate_rewards_from_functions` scores the fresh rows only and gives a replayed row its
  stored reward, so TRL's own judgement (`first >= second` after its EOS penalty, a function of
  the ids) picks the stored chosen again;
- `_forward` reads the policy's log-probs: at generation they are the behaviour log-probs a pair
  is stored with (the weights have not moved since TRL generated them); with `correction:
  truncated_is` a replayed pair's gradient is weighted by min(π(c)π(r) / (μ(c)μ(r)), is_cap),
  detached, through `w·log π + (1 − w)·sg(log π)`, which leaves TRL's loss value unchanged.

TRL recomputes every row's reference log-probs. Ties and identical completions are trained by
TRL as it always does but never stored (a tie is no preference to replay). With
`replay_pairs = 0` the trainer is TRL's, step for step (tested on losses).

Not here: vLLM generation (`use_vllm`; its splice would be `_generate_vllm`'s, untested without
a GPU), vision inputs, and several processes (each would keep its own table).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer

from llm_replay.buffer import Sample
from llm_replay.buffer.checkpoint import atomic_directory
from llm_replay.checks import integer
from llm_replay.config.parse import ConfigError, build
from llm_replay.config.preference import PreferenceConfig
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import ANNOTATORS
from llm_replay.frontend.checkpoint import TrainerCheckpoints
from llm_replay.frontend.meter import count_generated, count_metrics
from llm_replay.frontend.padded import pad_rows, sample_rows, unpad
from llm_replay.frontend.settings import as_mapping
from llm_replay.metrics import ComputeMeter
from llm_replay.preference.replay import PairReplay

TABLE_KNOBS = (
    "replay",
    "capacity",
    "max_age",
    "recency_half_life",
    "priority_exponent",
    "correction",
    "is_cap",
)
STATE_FILE = "online_dpo.json"


@dataclass
class ReplayOnlineDPOConfig(OnlineDPOConfig):  # type: ignore[misc]
    replay_pairs: int = field(
        default=0, metadata={"help": "stored pairs trained beside each step's fresh pairs"}
    )
    replay_knobs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "the pair table, as preference.* in an llm-replay config (a JSON string on "
            f"the command line): {list(TABLE_KNOBS)}, e.g. {{'replay': 'margin', 'capacity': "
            "512, 'correction': 'truncated_is'}}"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        integer("replay_pairs", self.replay_pairs, minimum=0)
        knobs = as_mapping(self.replay_knobs, "replay_knobs", "knob")
        unknown = sorted(set(knobs) - set(TABLE_KNOBS))
        if unknown:
            raise ConfigError(
                f"replay_knobs.{unknown[0]}: unknown; choose from {list(TABLE_KNOBS)}"
            )
        replay = "uniform" if self.replay_pairs else "none"
        self.table: PreferenceConfig = build(
            PreferenceConfig, {"replay": replay, **knobs}, "replay_knobs"
        )
        table = self.table
        if self.replay_pairs and table.replay == "none":
            raise ConfigError(
                f"replay_pairs = {self.replay_pairs}: replay_knobs.replay = 'none' draws no pairs"
            )
        if self.replay_pairs and (self.use_vllm or self.gradient_accumulation_steps != 1):
            raise ConfigError(
                "replay_pairs: with one generation per optimizer step and TRL's own generate only "
                "(use_vllm=False, gradient_accumulation_steps=1): the stored behaviour log-probs "
                "are the policy's at generation only then"
            )
        if table.correction == "truncated_is" and self.temperature != 1.0:
            raise ConfigError(
                f"temperature = {self.temperature}: replay_knobs.correction 'truncated_is' needs "
                "1.0, since TRL's log-probs (and so the stored behaviour) are at temperature 1"
            )


class ReplayOnlineDPOTrainer(TrainerCheckpoints, OnlineDPOTrainer):  # type: ignore[misc]
    """`OnlineDPOTrainer` whose steps also train stored pairs (module docstring)."""

    state_file = STATE_FILE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, ReplayOnlineDPOConfig):
            raise TypeError(f"args: expected ReplayOnlineDPOConfig, got {type(self.args).__name__}")
        if self.accelerator.num_processes > 1 and self.args.replay_pairs:
            raise ValueError("replay_pairs: one process only (each would keep its own table)")
        self.pairs = PairReplay.from_settings(self.args.table, seed=self.args.seed)
        self.meter = ComputeMeter(parameters=sum(p.numel() for p in self.model.parameters()))
        self._replayed: Sample | None = None
        self._fresh = 0
        self._generated: tuple[torch.Tensor, ...] | None = None
        self._scores: torch.Tensor | None = None
        self._policy: torch.Tensor | None = None
        self._reference: torch.Tensor | None = None
        self._weights: torch.Tensor | None = None
        self._trained: tuple[torch.Tensor, torch.Tensor] = (torch.zeros(0), torch.zeros(0))
        self.prompts_seen = 0  # a stored pair's group id is its prompt's number

    # ------------------------------------------------------------------ TRL hooks (each calls super)
    def training_step(
        self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> Any:
        if "image" in inputs:
            raise ValueError("image: replay of vision pairs is not supported")
        version = int(self.state.global_step)
        self.pairs.set_version(version)
        self._fresh = len(inputs["prompt"])
        self._replayed = self.pairs.draw(self.args.replay_pairs)
        self._weights = None
        if self._replayed is not None:
            s = self._replayed
            texts = [self.processing_class.decode(prompt) for prompt in sample_rows(s)[0][0::2]]
            inputs = {**inputs, "prompt": [*inputs["prompt"], *texts]}
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._after_step(version)
        return loss

    def _generate(self, model: Any, prompts: Any, images: Any = None) -> Any:
        out = super()._generate(model, prompts[: self._fresh], images)
        self._generated = tuple(out[:4])
        if self._replayed is None:
            return out
        prompts, completions = unpad(out[0].cpu(), out[1].cpu()), unpad(out[2].cpu(), out[3].cpu())
        stored_prompts, stored_completions, _ = sample_rows(self._replayed)
        n = self._fresh

        def spliced(fresh: list[Any], stored: list[Any]) -> list[Any]:  # chosen, then rejected
            return fresh[:n] + stored[0::2] + fresh[n:] + stored[1::2]

        padded = pad_rows(
            spliced(prompts, stored_prompts),
            spliced(completions, stored_completions),
            self.processing_class.pad_token_id,
        )
        names = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        return (*(torch.from_numpy(padded[k]).to(out[0].device) for k in names), out[4])

    def _calculate_rewards_from_functions(
        self, prompts: Any, completions: Any, completion_ids_list: Any, **kwargs: Any
    ) -> torch.Tensor:
        if self._replayed is None:
            scores: torch.Tensor = super()._calculate_rewards_from_functions(
                prompts, completions, completion_ids_list, **kwargs
            )
            self._scores = scores.clone()  # before TRL's EOS penalty, which is in place
            return scores
        b, n = len(prompts) // 2, self._fresh
        fresh_rows = [*range(n), *range(b, b + n)]

        def pick(values: Any) -> list[Any]:
            return [values[i] for i in fresh_rows]

        fresh = super()._calculate_rewards_from_functions(
            pick(prompts), pick(completions), pick(completion_ids_list), **kwargs
        )
        self._scores = fresh.clone()
        stored = torch.as_tensor(self._replayed.rewards, dtype=fresh.dtype, device=fresh.device)
        full = torch.empty(2 * b, dtype=fresh.dtype, device=fresh.device)
        full[fresh_rows] = fresh
        full[n:b], full[b + n :] = stored[0::2], stored[1::2]
        return full

    def _forward(
        self, model: Any, prompt_ids: Any, prompt_mask: Any, *args: Any, **kwargs: Any
    ) -> Any:
        out = super()._forward(model, prompt_ids, prompt_mask, *args, **kwargs)
        if not torch.is_grad_enabled():  # the reference's forward
            self._reference = out.detach()
            return out
        self._policy = out.detach()
        self._trained = (prompt_mask, args[1] if len(args) > 1 else kwargs["completion_mask"])
        if self._replayed is not None and self.args.table.correction == "truncated_is":
            weights = self._pair_weights(out.detach(), self._trained[1].to(out.dtype))
            self._weights = weights
            out = weights[:, None] * out + (1 - weights[:, None]) * out.detach()
        return out

    # ------------------------------------------------------------------ the table
    def _pair_weights(self, logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Each row's weight: 1 for a fresh row, its pair's truncated ratio for a replayed one."""
        assert self._replayed is not None
        s, n = self._replayed, self._fresh
        b = logprobs.size(0) // 2
        current = (logprobs * mask).sum(1)
        behaviour = torch.as_tensor(
            (s.behaviour_logprobs * s.loss_mask).sum(1), dtype=current.dtype, device=current.device
        )
        replayed = torch.cat([current[n:b], current[b + n :]])  # chosen rows, then rejected
        log_ratio = replayed - torch.cat([behaviour[0::2], behaviour[1::2]])
        pair = (log_ratio[: b - n] + log_ratio[b - n :]).exp().clamp(max=self.args.table.is_cap)
        weights = torch.ones(2 * b, dtype=current.dtype, device=current.device)
        weights[n:b], weights[b + n :] = pair, pair
        return weights

    def _after_step(self, version: int) -> None:
        """Store the fresh pairs TRL judged (no ties); record the replayed pairs' margins."""
        assert self._generated is not None and self._scores is not None
        assert self._policy is not None and self._reference is not None
        prompt_ids, prompt_mask, completion_ids, completion_mask = self._generated
        n, b = self._fresh, self._policy.size(0) // 2
        judged = self._scores.clone()
        if self.args.missing_eos_penalty is not None:
            eos = torch.isin(completion_ids, torch.tensor(self.eos_token_ids, device=judged.device))
            judged[~eos.any(-1)] -= self.args.missing_eos_penalty
        first = (judged[:n] >= judged[n:]).cpu()
        chosen = torch.where(first, torch.arange(n), torch.arange(n) + n)
        rejected = torch.where(first, torch.arange(n) + n, torch.arange(n))
        scored = torch.isfinite(judged[:n]) & torch.isfinite(judged[n:])  # no reward: no verdict
        keep = ((judged[:n] != judged[n:]) & scored).cpu()  # nor is a tie one to replay
        order = torch.stack([chosen, rejected], 1)[keep].reshape(-1).numpy()
        width = completion_ids.size(1)
        policy = torch.cat([self._policy[:n], self._policy[b : b + n]])[:, :width]
        round_ = _batch(
            (prompt_ids, prompt_mask, completion_ids, completion_mask),
            policy,
            self._scores,
            version=version,
            first_group=self.prompts_seen,
            chosen=chosen[keep].numpy(),
        )
        self.prompts_seen += n
        count_generated(self.meter, round_, prompts=n)
        prompts, completions = (int(m.sum()) for m in self._trained)
        self.meter.add(  # the policy's forward and backward, and TRL's reference forward
            rollouts_trained=2 * b,
            tokens_trained=prompts + completions,
            completion_tokens_trained=completions,
            forward_only_tokens=prompts + completions,
            gradient_steps=1,
        )
        if len(order) and self.pairs.replays:
            self.pairs.insert(round_.select(order))
        if self._replayed is not None:
            self._record_replayed(b, n)
        stats = {
            "replay/pairs_replayed": 0.0 if self._replayed is None else len(self._replayed) / 2,
            "replay/pairs_stored_now": float(len(order) // 2),
            **count_metrics(self.meter, "replay/"),
            **self.pairs.metrics(version),
        }
        if self._weights is not None:
            stats["replay/pair_weight_mean"] = float(self._weights[n:b].mean())
        for key, value in stats.items():
            self.stats.setdefault(key, []).append(float(value))
        for key, values in self.stats.items():  # TRL averages each key's list when it logs
            if key not in stats and key.startswith(("replay/", "preference/")):
                values.append(float("nan"))

    def _record_replayed(self, b: int, n: int) -> None:
        """σ(−β h) of each replayed pair as trained, for `margin` draws."""
        assert (
            self._replayed is not None and self._policy is not None and self._reference is not None
        )
        s = self._replayed
        width = int(s.completion_lengths.max())
        mask = torch.as_tensor(np.arange(width)[None, :] < s.completion_lengths[:, None])
        pol = torch.cat([self._policy[n:b], self._policy[b + n :]])[:, :width]
        ref = torch.cat([self._reference[n:b], self._reference[b + n :]])[:, :width]
        stored_order = torch.cat([mask[0::2], mask[1::2]]).to(pol.dtype)
        pol_sum, ref_sum = (pol * stored_order).sum(1), (ref * stored_order).sum(1)
        k = b - n
        h = (pol_sum[:k] - pol_sum[k:]) - (ref_sum[:k] - ref_sum[k:])
        wrongness = torch.sigmoid(-self.beta * h).cpu().numpy()
        self.pairs.update(s.keys[0::2], wrongness)

    # ------------------------------------------------------------------ checkpoints
    def save_replay_state(self, target: Path) -> None:
        with atomic_directory(target) as staging:
            self.pairs.save(staging)
            state = {"meter": self.meter.state_dict(), "prompts_seen": self.prompts_seen}
            (staging / STATE_FILE).write_text(json.dumps(state))

    def load_replay_state(self, directory: Path) -> None:
        self.pairs.load(directory)
        state = json.loads((directory / STATE_FILE).read_text())
        self.meter.load_state_dict(state["meter"])
        self.prompts_seen = int(state["prompts_seen"])


def _batch(
    padded: tuple[torch.Tensor, ...],
    logprobs: torch.Tensor,
    scores: torch.Tensor,
    *,
    version: int,
    first_group: int,
    chosen: np.ndarray,
) -> RolloutBatch:
    """A generated round (rows i and n + i: prompt i's two completions) as rollouts: scores as
    rewards, the policy's log-probs at generation as the behaviour's, a prompt's number as its
    group, the `chosen` rows marked correct, every row annotated by TRL's reward model or judge."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = (t.cpu() for t in padded)
    completions = unpad(completion_ids, completion_mask)
    rewards = np.nan_to_num(scores.detach().cpu().numpy().astype(np.float64), nan=0.0)
    n = len(completions)
    correct = np.zeros(n, dtype=bool)
    correct[chosen] = True
    return RolloutBatch.from_ragged(
        prompt_ids=unpad(prompt_ids, prompt_mask),
        completion_ids=completions,
        behaviour_logprobs=unpad(logprobs.cpu(), completion_mask),
        rewards=rewards,
        advantages=np.where(correct, 1.0, -1.0),
        group_ids=first_group + np.arange(n) % (n // 2),
        policy_versions=np.full(n, version, dtype=np.int64),
        correct=correct,
        finish_reasons=["stop"] * n,
        allow_empty=True,
        annotators=np.full(n, ANNOTATORS.index("reward_model"), dtype=np.uint8),
    )
