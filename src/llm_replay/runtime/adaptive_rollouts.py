"""Spend generation where it teaches: AR3PO's adaptive rollout and response reuse.

After AR3PO (arXiv 2509.25808, up to 4.2× fewer rollouts than DAPO at equal accuracy). A fixed
group of G completions per prompt pays G generations for a prompt the policy already solves and
still ends with no signal for one it cannot: an all-correct or all-wrong group has zero advantage
under group baselines. Here a round samples in stages of `stage_size` (k) completions: every
prompt gets k, and only the prompts with no correct completion yet get k more, up to G in all. A
prompt that found a correct completion stops: its group is either informative already (right and
wrong) or all right, and all right after k costs k, not G.

Response reuse: a prompt with no correct completion after every stage has nothing to learn from
this round. When an earlier round solved it, its latest correct completion (kept per train
prompt, with the log-probs of the policy that sampled it) takes the place of one of the wrong
ones, so the group has a success to move toward. That row was sampled by older weights: the
learner treats it as reused (its ratio against the behaviour log-probs, the token controls on
reused rows), and it is not charged as generation. A kept completion scored under an older reward
version (a refreshed reward model) is not reused.

The meter counts only what is generated; `adaptive/rollouts_per_prompt`, `adaptive/unsolved`
(the share of prompts with no correct completion after every stage), `adaptive/reused` (rows
reused this round) and `adaptive/first_stage_correct` (the first stage's correct share: the
policy's pass@1 on fresh prompts, which the round's correct share understates, since unsolved
prompts get more rollouts) go into the log. State is JSON (the kept completions and the counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from llm_replay.config.prompts import AdaptiveRolloutConfig
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import FINISH_REASONS
from llm_replay.metrics import ComputeMeter


class StagedSampler(Protocol):
    """What the stages need of `runtime.rollouts.RolloutMaker`."""

    group_size: int

    @property
    def prompts(self) -> Sequence[Sequence[int]]: ...

    @property
    def reward_version(self) -> int: ...

    def sample(
        self,
        indices: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
        n: int,
        first_group: int,
        meter: ComputeMeter,
        *,
        new_prompts: bool,
    ) -> tuple[RolloutBatch, npt.NDArray[np.float32]]: ...


def prompt_key(prompt_ids: Any) -> str:
    """A prompt's token ids as a key (JSON-safe): the same prompt drawn twice is one entry."""
    return " ".join(str(int(t)) for t in prompt_ids)


@dataclass(frozen=True)
class KeptSuccess:
    """A prompt's latest correct completion, as sampled."""

    completion_ids: list[int]
    behaviour_logprobs: list[float]
    reward: float
    policy_version: int
    reward_version: int
    finish_reason: int

    def to_json(self) -> list[Any]:
        return [
            self.completion_ids,
            self.behaviour_logprobs,
            self.reward,
            self.policy_version,
            self.reward_version,
            self.finish_reason,
        ]

    @classmethod
    def from_json(cls, value: list[Any]) -> KeptSuccess:
        ids, logprobs, reward, version, reward_version, finish = value
        return cls(
            [int(t) for t in ids],
            [float(x) for x in logprobs],
            float(reward),
            int(version),
            int(reward_version),
            int(finish),
        )


class AdaptiveRollouts:
    """Staged sampling and response reuse for one run (see the module docstring)."""

    def __init__(self, settings: AdaptiveRolloutConfig, *, run_totals: bool = True) -> None:
        """`run_totals=False` (a generation worker of the threaded and Ray runtimes, whose kept
        completions are its own cache): only this round's metrics and the cache's size, since
        the learner averages what its workers report."""
        self.settings = settings
        self.run_totals = run_totals
        self.kept: dict[str, KeptSuccess] = {}  # by prompt: a problem space can repeat prompts
        self.round: dict[str, float] = {}
        self.reused_rows = np.zeros(0, dtype=bool)  # of the last batch `reuse` returned
        self.totals = {"prompts": 0, "rollouts": 0, "unsolved": 0, "reused": 0}

    def sample(
        self,
        maker: StagedSampler,
        indices: npt.NDArray[np.int64],
        first_group: int,
        meter: ComputeMeter,
    ) -> tuple[RolloutBatch, npt.NDArray[np.float32]]:
        """The round's generated rows, prompt-major (each group's stages in order), and the
        sampled tokens' entropies."""
        k = self.settings.stage_size
        active = np.arange(len(indices))
        solved = np.zeros(len(indices), dtype=bool)
        parts: list[RolloutBatch] = []
        entropies: list[npt.NDArray[np.float32]] = []
        for stage in range(maker.group_size // k):
            part, ent = maker.sample(indices, active, k, first_group, meter, new_prompts=stage == 0)
            parts.append(part)
            entropies.append(ent)
            solved[part.group_ids[part.correct.astype(bool)] - first_group] = True
            active = active[~solved[active]]
            if not len(active):
                break
        batch = RolloutBatch.concat(parts)
        batch = batch.select(np.argsort(batch.group_ids, kind="stable"))
        self._keep(batch)
        n = len(indices)
        self.round = {
            "adaptive/rollouts_per_prompt": len(batch) / max(1, n),
            "adaptive/unsolved": float((~solved).mean()) if n else 0.0,
            "adaptive/stages": float(len(parts)),
            # every prompt's first stage: the policy's pass@1 on fresh prompts, unbiased (the
            # round's correct share is not, since unsolved prompts get more rollouts)
            "adaptive/first_stage_correct": float(parts[0].correct.mean())
            if len(parts[0])
            else 0.0,
        }
        self.totals["prompts"] += n
        self.totals["rollouts"] += len(batch)
        self.totals["unsolved"] += int((~solved).sum())
        return batch, np.concatenate(entropies)

    def _keep(self, batch: RolloutBatch) -> None:
        """Each solved prompt's last correct row becomes its kept success."""
        last: dict[int, int] = {}
        for row in np.flatnonzero(batch.correct.astype(bool)).tolist():
            last[int(batch.group_ids[row])] = row
        for index in last.values():
            r = batch[index]
            self.kept[prompt_key(r.prompt_ids)] = KeptSuccess(
                r.completion_ids.tolist(),
                r.behaviour_logprobs.tolist(),
                float(r.reward),
                int(r.policy_version),
                int(r.reward_version),
                int(batch.finish_reasons[index]),
            )

    def reuse(
        self,
        batch: RolloutBatch,
        indices: npt.NDArray[np.int64],
        first_group: int,
        maker: StagedSampler,
    ) -> RolloutBatch:
        """`batch` with each unsolved prompt's last row replaced by its kept success, where one
        was kept under the scorer's current reward version. `reused_rows` marks the rows put in."""
        self.reused_rows = np.zeros(len(batch), dtype=bool)
        drop: list[int] = []
        add: list[RolloutBatch] = []
        for group in np.unique(batch.group_ids) if self.settings.reuse else ():
            members = np.flatnonzero(batch.group_ids == group)
            if batch.correct[members].any():
                continue
            prompt = maker.prompts[int(indices[group - first_group])]
            kept = self.kept.get(prompt_key(prompt))
            if kept is None or kept.reward_version != maker.reward_version:
                continue
            drop.append(int(members[-1]))
            row = self._row(kept, prompt, int(group))
            task = batch.task_names[int(batch.task_codes[members[-1]])]
            add.append(row.with_tasks(task) if task else row)  # a mixture's member, kept
        if add:
            keep = np.setdiff1d(np.arange(len(batch)), np.asarray(drop))
            batch = RolloutBatch.concat([batch.select(keep), *add])
            marks = np.concatenate([np.zeros(len(keep), bool), np.ones(len(add), bool)])
            order = np.argsort(batch.group_ids, kind="stable")
            batch, self.reused_rows = batch.select(order), marks[order]
        self.round["adaptive/reused"] = float(len(add))
        self.totals["reused"] += len(add)
        return batch

    @staticmethod
    def _row(kept: KeptSuccess, prompt: Any, group: int) -> RolloutBatch:
        return RolloutBatch.from_flat(
            prompt_ids=np.asarray(prompt, np.int32),
            prompt_lengths=np.asarray([len(prompt)], np.int32),
            completion_ids=np.asarray(kept.completion_ids, np.int32),
            completion_lengths=np.asarray([len(kept.completion_ids)], np.int32),
            behaviour_logprobs=np.asarray(kept.behaviour_logprobs, np.float32),
            rewards=np.asarray([kept.reward]),
            group_ids=np.asarray([group], np.int64),
            policy_versions=np.asarray([kept.policy_version], np.int64),
            correct=np.ones(1, np.int8),
            finish_reasons=[FINISH_REASONS[kept.finish_reason]],
            reward_versions=np.asarray([kept.reward_version], np.int64),
        )

    def metrics(self) -> dict[str, float]:
        t = self.totals
        out = {**self.round, "adaptive/kept": float(len(self.kept))}
        if self.run_totals:
            out["adaptive/reused_total"] = float(t["reused"])
            out["adaptive/rollouts_per_prompt_mean"] = t["rollouts"] / max(1, t["prompts"])
        return out

    def state(self) -> dict[str, Any]:
        return {
            "kept": {k: v.to_json() for k, v in self.kept.items()},
            "totals": dict(self.totals),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        try:
            self.kept = {str(k): KeptSuccess.from_json(v) for k, v in state["kept"].items()}
            self.totals = {k: int(state["totals"][k]) for k in self.totals}
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"adaptive rollout state: unreadable ({error!r})") from None


def worker_adaptive(settings: AdaptiveRolloutConfig) -> AdaptiveRollouts | None:
    """A generation worker's own adaptive rollouts (threaded and Ray runtimes), or None when the
    run does not use them. Its kept completions are a cache of what this worker saw solved: not
    shared between workers and not checkpointed, so a resumed run starts with empty caches."""
    return AdaptiveRollouts(settings, run_totals=False) if settings.enabled else None
