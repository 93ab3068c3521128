"""What a baseline sweep moves (issue #53): each member's settings against the baseline's, and the
knobs of the one-knob playbook that it leaves where they were.

A saving read against the envelope of a sweep is only as strict as the sweep. The playbook the
issue names (IsoCompute, arXiv 2603.12151) tunes on-policy's allocation: its learning rate, its
gradient steps a round and its group size at the same rollouts a round. An envelope that does not
move one of them is looser than the playbook's, and every method reads no worse against it; the
built-in tasks' first sweeps swept the learning rate and the steps but not the group size, and
halving the group size was the tuned member on four of the nine tasks with a sweep. So the
report says what each member changes, by what factor, and which of the playbook's knobs no
member moves. The settings are the runs' own (`compare.protocol_of`), so a member that a preset
or an experiment-wide setting changes is read as it ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llm_replay.experiments.archive import flatten

if TYPE_CHECKING:
    from llm_replay.config import Config

PLAYBOOK = {
    "optim.lr": "learning rate",
    "train.batch_size": "gradient steps a round",
    "generation.group_size": "group size",
}
"""The knobs of the one-knob playbook, by the setting that moves each. Steps a round move by the
step's size (half the rows, twice the steps); group size moves with prompts a round."""

INVERSE = frozenset({"train.batch_size"})
"""Settings whose knob moves against them: a step of half the rows is twice the steps a round."""

NOT_KNOBS = frozenset(
    {"name", "train.seed", "train.micro_batch_size", "train.threads", "train.compute_budget"}
)
"""Settings that say how or how long a run runs, not what it trains (a micro-batch is memory)."""

COMPANIONS = {"generation.prompts_per_step": "generation.group_size"}
"""Settings that move with a knob to keep the rollouts a round (a group size halved, prompts
doubled): part of that knob's move where it moves too, not a second knob."""


PLAYBOOK_NAME = "playbook"
"""`baseline_sweep: playbook` (alone or among names): the playbook's members around the baseline."""


def playbook_members(baseline: str, config: Config) -> dict[str, list[str]]:
    """The one-knob playbook around a baseline's resolved `config`: `{name: its --set lines}`,
    each member the baseline with one knob moved, at the same rollouts a round: the learning rate
    halved and doubled, twice the gradient steps a round (a step of half the rows), and the group
    size halved and doubled (prompts a round doubled and halved). Halving the steps a round (a
    step of two rounds' rows) is left out: a step larger than a round is what the config warns
    of, and the coverage line says the knob moved one way only. A move the settings cannot take
    (an odd step or group size, a group below 2, an odd number of prompts) is left out too; the
    coverage line names the knob it leaves. Names
    follow the suite's sweep (`on_policy_group4` around a group of 8), so an archived member
    with the same settings is reused, and they come in the suite's order (a tie on the compute
    axis goes to the first listed)."""
    lr, g = config.optim.lr, config.generation
    batch, micro = config.train.batch_size, config.train.micro_batch_size
    members: dict[str, list[str]] = {}
    if batch % 2 == 0:
        half = batch // 2
        members[f"{baseline}_steps2"] = [
            f"train.batch_size={half}",
            f"train.micro_batch_size={min(micro, half)}",
        ]
    members[f"{baseline}_lr2x"] = [f"optim.lr={lr * 2!r}"]
    members[f"{baseline}_lr_half"] = [f"optim.lr={lr / 2!r}"]
    if g.group_size % 2 == 0 and g.group_size >= 4:
        members[f"{baseline}_group{g.group_size // 2}"] = [
            f"generation.group_size={g.group_size // 2}",
            f"generation.prompts_per_step={g.prompts_per_step * 2}",
        ]
    if g.prompts_per_step % 2 == 0:
        members[f"{baseline}_group{g.group_size * 2}"] = [
            f"generation.group_size={g.group_size * 2}",
            f"generation.prompts_per_step={g.prompts_per_step // 2}",
        ]
    return members


def member_changes(baseline: Mapping[str, Any], member: Mapping[str, Any]) -> dict[str, Any]:
    """`{setting: [baseline's, member's]}` for every setting of the run that differs."""
    base, own = flatten(dict(baseline)), flatten(dict(member))
    return {
        key: [base.get(key), own.get(key)]
        for key in sorted(base.keys() | own.keys())
        if key not in NOT_KNOBS and base.get(key) != own.get(key)
    }


def _factor(change: list[Any]) -> float | None:
    old, new = change
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in change)
    return float(new) / float(old) if numbers and old else None


def sweep_coverage(protocols: Mapping[str, Mapping[str, Any]], baseline: str) -> dict[str, Any]:
    """`protocols`: each member's run settings (the baseline's among them). Returns each member's
    changes, each playbook knob's factors with the members that move it, and the knobs no member
    moves (`unswept`) or moves one way only (`one_way`), and the members that move more than
    one of them (`several`)."""
    if baseline not in protocols:
        raise ValueError(
            f"baseline {baseline!r}: no settings among the sweep's {sorted(protocols)}"
        )
    changes = {
        m: member_changes(protocols[baseline], p) for m, p in protocols.items() if m != baseline
    }
    swept: dict[str, list[list[Any]]] = {}
    for member, changed in changes.items():
        for key in PLAYBOOK:
            if key in changed:
                swept.setdefault(key, []).append([_factor(changed[key]), member])
    for key, entries in swept.items():  # by the knob's factor (a step's size moves against it)
        entries.sort(key=lambda e: (e[0] is None, _knob_factor(key, e[0]) or 0.0))
    return {
        "changes": changes,
        "several": sorted(
            m for m, changed in changes.items() if len(PLAYBOOK.keys() & changed) > 1
        ),
        "swept": swept,
        "unswept": [k for k in PLAYBOOK if k not in swept],
        "one_way": [
            k
            for k, entries in ((k, swept[k]) for k in PLAYBOOK if k in swept)
            if not (
                any(f is not None and f < 1 for f, _ in entries)
                and any(f is not None and f > 1 for f, _ in entries)
            )
        ],
    }


def _knob_factor(key: str, factor: float | None) -> float | None:
    return None if factor is None else (1.0 / factor if key in INVERSE else factor)


def _moves(key: str, factor: float | None, member: str) -> str:
    """ "×2 (on_policy_steps2, train.batch_size ×0.5)": the knob's factor, then the setting's."""
    knob = _knob_factor(key, factor)
    if factor is None or knob is None:
        return f"changed ({member}: {key})"
    setting = f", {key} ×{factor:g}" if key in INVERSE else ""
    return f"×{knob:g} ({member}{setting})"


def coverage_line(coverage: Mapping[str, Any]) -> str:
    """One sentence: what the sweep moves, by how much and in which members, and what it leaves."""
    moved = [
        f"{PLAYBOOK[key]} " + ", ".join(_moves(key, f, m) for f, m in coverage["swept"][key])
        for key in PLAYBOOK
        if key in coverage["swept"]
    ]
    text = "The sweep moves " + ("; ".join(moved) if moved else "none of the playbook's knobs")
    others = sorted(
        {
            k
            for changed in coverage["changes"].values()
            for k in changed
            if k not in PLAYBOOK and COMPANIONS.get(k) not in changed
        }
    )
    if others:
        text += f"; and beyond them {', '.join(others)}"
    text += "."
    if coverage["unswept"]:
        names = ", ".join(PLAYBOOK[k] for k in coverage["unswept"])
        text += (
            f" Not swept: {names}. The envelope is looser than the one-knob playbook's, and "
            "every method reads no worse against it than it would against a full sweep."
        )
    if coverage.get("several"):
        text += (
            f" Moving more than one of them: {', '.join(coverage['several'])} (not one knob at "
            "a time)."
        )
    if coverage["one_way"]:
        text += f" Moved one way only: {', '.join(PLAYBOOK[k] for k in coverage['one_way'])}."
    return text
