"""On-policy tuned as a user would tune it (issue #53): every method read against the envelope
of a baseline sweep as well as against plain on-policy.

A saving measured against on-policy at replay's own settings (learning rate, gradient steps,
prompts per round, group size) may only say that those settings did not suit on-policy. An
experiment file may declare `baseline_sweep: [NAMES]`, methods that are on-policy with one knob
changed at a time (the baseline is always a member). The sweep's *envelope* is, at each compute,
its best member: it first reaches an accuracy when its first member does. Read seed by seed (seed
s of every run shares prompt order and sampling stream), with smoothed accuracy and reach as
`analysis` defines them:

- target `baseline_final`: the baseline's smoothed final accuracy on s (`compare_methods`' own);
- target `best_member_final`, harder: the highest smoothed final accuracy of any member on s;
- the envelope's compute to a target on s: the least over members of their compute to reach it;
  the member that reaches it first is the target's *leader* on s;
- a method's ratio: its compute to the target ÷ the envelope's, on s (`analysis._ratio`); the
  median over seeds and its bootstrap 95% interval as `compare_methods` reports them, "never
  reached" counted as infinite, and the per-seed ratios kept;
- along the μ = 5 axis: each member's median over seeds on a common grid (`on_grid`, where more
  than half its seeds reach, as the plots draw it), the envelope their maximum, and the leader at
  each grid point the member on top (a tie goes to the first listed, the baseline first).

Decisions. The ratios take the envelope seed by seed (its least compute on s) while the axis
takes it over the members' medians: the first is the paired reading a saving rests on, the
second a picture of who leads where, and a member may lead one and not the other. A member is
read only where it has finished every seed the baseline has; one that has not is left out of the
envelope entirely and named with why (`members_left_out`), rather than read on some seeds and not
others: an envelope over fewer members is looser and flatters every method, so the report says
so. Plots are in `envelope_plot.py`.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llm_replay.experiments.analysis import (
    RunCurves,
    _ratio,
    _seed,
    median_interval,
    median_or_none,
)
from llm_replay.experiments.envelope_axis import AXIS, leaders_on_axis, segments_text
from llm_replay.experiments.final_gap import across as final_gap_across
from llm_replay.experiments.final_gap import gap_digest, gap_reading
from llm_replay.experiments.final_gap import note_line as final_gap_note
from llm_replay.experiments.resolution import note_line as resolution_note
from llm_replay.experiments.resolution import resolution_digest, resolution_reading
from llm_replay.experiments.suite_stats import (
    BASIS,
    MEDIAN_RATIO_GOAL,
    median_across_uncertainty,
)
from llm_replay.experiments.suite_stats import interval_text as _interval
from llm_replay.experiments.suite_stats import ratio_text as _x
from llm_replay.experiments.suite_stats import share_text as _share
from llm_replay.experiments.sweep_knobs import PLAYBOOK, coverage_line
from llm_replay.experiments.tuned_member import (
    DIVERSITY_COUNTED,
    member_digest,
    member_diversity,
    member_reading,
    member_word,
)

TARGETS = ("baseline_final", "best_member_final")


def members_read(
    runs: Mapping[str, Sequence[RunCurves]], baseline: str, sweep: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """The sweep's members (the baseline first) that have finished every seed the baseline has,
    and those left out, each with why."""
    seeds = {_seed(c, i) for i, c in enumerate(runs[baseline])}
    read: list[str] = []
    left_out: dict[str, str] = {}
    for name in dict.fromkeys([baseline, *sweep]):
        missing = sorted(seeds - {_seed(c, i) for i, c in enumerate(runs.get(name, ()))})
        if missing:
            left_out[name] = f"no finished run of seed(s) {missing}"
        else:
            read.append(name)
    return read, left_out


def envelope_reading(
    runs: Mapping[str, Sequence[RunCurves]],
    *,
    baseline: str,
    sweep: Sequence[str],
    bases: Sequence[str] = (AXIS,),
    distinct: float | None = None,
) -> dict[str, Any]:
    """Every method of `runs` against the envelope of `sweep` (the baseline added), on each of
    `bases`, on both targets; which member reached each target first on each seed; and which
    member is on top along the μ = 5 axis (the module docstring has the definitions)."""
    if baseline not in runs:
        raise ValueError(f"baseline = {baseline!r}: not among the methods {sorted(runs)}")
    members, left_out = members_read(runs, baseline, sweep)
    by_seed = {m: {_seed(c, i): c for i, c in enumerate(runs[m])} for m in members}
    seeds = sorted(by_seed[baseline])
    finals = {s: {m: float(by_seed[m][s].smoothed[-1]) for m in members} for s in seeds}
    levels = {
        "baseline_final": {s: finals[s][baseline] for s in seeds},
        "best_member_final": {s: max(finals[s].values()) for s in seeds},
    }
    targets: dict[str, Any] = {}
    envelope: dict[str, dict[str, dict[int, float | None]]] = {}
    for kind, level in levels.items():
        first = {
            b: {s: _first({m: by_seed[m][s].reach(level[s], b) for m in members}) for s in seeds}
            for b in bases
        }
        envelope[kind] = {b: {s: first[b][s][1] for s in seeds} for b in bases}
        targets[kind] = {
            "level": float(np.median([level[s] for s in seeds])),
            "level_per_seed": [level[s] for s in seeds],
            "envelope_compute": {
                b: median_or_none(list(envelope[kind][b].values())) for b in bases
            },
            "envelope_compute_per_seed": {b: list(envelope[kind][b].values()) for b in bases},
            "leader_per_seed": {b: [first[b][s][0] for s in seeds] for b in bases},
        }
    targets["best_member_final"]["best_member_per_seed"] = [
        max(finals[s], key=finals[s].__getitem__) for s in seeds
    ]
    methods = {
        name: _method(name, curves, levels, envelope, bases) for name, curves in runs.items()
    }
    resolution = resolution_reading(by_seed, levels["baseline_final"], runs, bases, distinct)
    problems = dict(zip(seeds, resolution["problems_per_seed"], strict=True))
    return {
        "baseline": baseline,
        "members": members,
        "members_left_out": left_out,
        "seed_ids": seeds,
        "bases": list(bases),
        "targets": targets,
        "methods": methods,
        "tuned_member": member_reading(by_seed, levels["baseline_final"], runs, bases),
        "resolution": resolution,
        "final_gap": gap_reading(by_seed, runs, problems),
        "axis": leaders_on_axis({m: runs[m] for m in members}),
    }


def _first(reach: dict[str, float | None]) -> tuple[str | None, float | None]:
    """The member that reached first and its compute (a tie: the first listed)."""
    known = {m: v for m, v in reach.items() if v is not None}
    if not known:
        return None, None
    leader = min(known, key=known.__getitem__)
    return leader, known[leader]


def _method(
    name: str,
    curves: Sequence[RunCurves],
    levels: dict[str, dict[int, float]],
    envelope: dict[str, dict[str, dict[int, float | None]]],
    bases: Sequence[str],
) -> dict[str, Any]:
    """One method's paired ratios against the envelope on both targets."""
    seeds = [_seed(c, i) for i, c in enumerate(curves)]
    missing = [s for s in seeds if s not in levels["baseline_final"]]
    if missing:
        raise ValueError(f"{name}: seed(s) {missing} have no baseline run to pair with")
    out: dict[str, Any] = {"seed_ids": seeds}
    for kind, level in levels.items():
        reach = {
            b: [c.reach(level[s], b) for c, s in zip(curves, seeds, strict=True)] for b in bases
        }
        per_seed = {
            b: [_ratio(v, envelope[kind][b][s]) for v, s in zip(reach[b], seeds, strict=True)]
            for b in bases
        }
        out[kind] = {
            "ratio": {b: median_or_none(per_seed[b]) for b in bases},
            "ratio_ci95": {b: median_interval(per_seed[b]) for b in bases},
            "ratio_per_seed": per_seed,
            "never_reached_seeds": {b: sum(v is None for v in reach[b]) for b in bases},
        }
    return out


def basis_of(reading: Mapping[str, Any]) -> str:
    """The basis the tables read the envelope on: μ = 5 where it was read, else the first."""
    bases = list(reading.get("bases") or [AXIS])
    return AXIS if AXIS in bases else bases[0]


def leaders_cell(reading: Mapping[str, Any], method: str, kind: str = "baseline_final") -> str:
    """ "on_policy_lr2x 2/3, on_policy 1/3": the members that reached the target first, counted
    over the seeds `method` ran (the members it is read against)."""
    entry = reading["methods"].get(method)
    if entry is None:
        return "—"
    basis = basis_of(reading)
    leader_of = dict(
        zip(reading["seed_ids"], reading["targets"][kind]["leader_per_seed"][basis], strict=True)
    )
    seeds = [s for s in entry["seed_ids"] if s in leader_of]
    counts = Counter(leader_of[s] for s in seeds)
    return ", ".join(f"{m} {n}/{len(seeds)}" for m, n in counts.most_common()) or "—"


def note_lines(reading: Mapping[str, Any]) -> list[str]:
    """What the envelope is made of and who leads where, in sentences under a table."""
    basis, baseline = basis_of(reading), reading["baseline"]
    members = ", ".join(reading["members"])
    lines = [f"Tuned on-policy: the envelope of {members} (at each compute, the best of them)."]
    member = (reading.get("tuned_member") or {}).get("member", {}).get(basis)
    if member is not None:
        lines.append(
            f"Tuned member: {member}, the one setting a user would pick (least median compute to "
            f"{reading['baseline']}'s final accuracy on {basis}), read seed by seed as a third "
            "reading beside the envelope, which picks the best member on each seed."
        )
    if reading.get("sweep"):  # absent in a summary written before it
        lines.append(coverage_line(reading["sweep"]))
    if reading["members_left_out"]:
        gone = "; ".join(f"{m}: {why}" for m, why in reading["members_left_out"].items())
        lines.append(
            f"Left out of the envelope ({gone}): an envelope over fewer members is looser and "
            "flatters every method."
        )
    base = reading["methods"][baseline]
    for kind, what in (
        ("baseline_final", f"{baseline}'s final accuracy"),
        ("best_member_final", "the best member's final accuracy"),
    ):
        target, per_seed = reading["targets"][kind], []
        for i, seed in enumerate(reading["seed_ids"]):
            ratio = base[kind]["ratio_per_seed"][basis][i]
            best = target.get("best_member_per_seed")
            per_seed.append(
                f"seed {seed} at {100 * target['level_per_seed'][i]:.1f}%"
                + ("" if best is None else f" of {best[i]}")
                + f": {target['leader_per_seed'][basis][i]} ("
                + ("never" if ratio is None else f"{ratio:.2f}×")
                + ")"
            )
        lines.append(
            f"First to {what} on {basis} ({baseline}'s compute ÷ the envelope's): "
            + "; ".join(per_seed)
            + "."
        )
    lines.append(
        f"On top along {AXIS} compute (medians over seeds; a tie goes to the first listed): "
        f"{segments_text(reading)}."
    )
    notes = (resolution_note(reading, basis), final_gap_note(reading))
    return [*lines, *(note for note in notes if note is not None)]


def task_digest(reading: Mapping[str, Any], basis: str) -> dict[str, Any]:
    """One task's envelope in a suite's summary: its members, who reached each target first on
    each seed, how much slower plain on-policy was, and who leads along the μ = 5 axis."""
    base = reading["methods"][reading["baseline"]]
    targets = reading["targets"]
    return {
        "members": reading["members"],
        "members_left_out": reading["members_left_out"],
        "unswept": (reading.get("sweep") or {}).get("unswept"),
        "seed_ids": reading["seed_ids"],
        "first_to_target_per_seed": targets["baseline_final"]["leader_per_seed"][basis],
        "baseline_vs_tuned": base["baseline_final"]["ratio"][basis],
        "baseline_vs_tuned_per_seed": base["baseline_final"]["ratio_per_seed"][basis],
        "best_member_per_seed": targets["best_member_final"]["best_member_per_seed"],
        "best_final_per_seed": targets["best_member_final"]["level_per_seed"],
        "first_to_best_final_per_seed": targets["best_member_final"]["leader_per_seed"][basis],
        "leads": {k: reading["axis"][k] for k in ("segments", "share", "quarters")},
        "tuned_member": _tuned(reading).get("member", {}).get(basis),
        "eval_problems": (reading.get("resolution") or {}).get("problems_per_seed"),
        **{f"baseline_{k}": v for k, v in gap_digest(reading, reading["baseline"]).items()},
    }


def _tuned(reading: Mapping[str, Any]) -> Mapping[str, Any]:
    """The tuned-member reading (`tuned_member.py`); empty in a summary written before it."""
    return reading.get("tuned_member") or {}


def method_digest(reading: Mapping[str, Any], method: str, basis: str) -> dict[str, Any]:
    """One method on one task against the envelope, both targets, per seed kept."""
    entry = reading["methods"][method]
    first, harder = entry["baseline_final"], entry["best_member_final"]
    return {
        "seed_ids": entry["seed_ids"],
        "ratio": first["ratio"][basis],
        "ratio_ci95": first["ratio_ci95"][basis],
        "ratio_per_seed": first["ratio_per_seed"][basis],
        "never_reached_seeds": first["never_reached_seeds"][basis],
        "harder_ratio": harder["ratio"][basis],
        "harder_ratio_ci95": harder["ratio_ci95"][basis],
        "harder_ratio_per_seed": harder["ratio_per_seed"][basis],
        "first_member": leaders_cell(reading, method),
        **member_digest(_tuned(reading), method, basis),
        **resolution_digest(reading.get("resolution") or {}, method, basis),
        **gap_digest(reading, method),
    }


def add_to_suite(reading: dict[str, Any], summaries: Mapping[str, Mapping[str, Any]]) -> None:
    """A suite's reading against tuned on-policy, where its tasks declare a sweep: each task's
    digest (`tasks.TASK.envelope`), each method's ratios on it (`methods.M.tasks.TASK.vs_tuned`)
    and across the tasks the baseline gains on (`methods.M.across.vs_tuned`), as the plain ratios
    are read across tasks (never reached as infinite; a bootstrap over each task's seeds)."""
    for task, summary in summaries.items():
        envelope = summary.get("envelope")
        if not envelope:
            continue
        reading["tasks"][task]["envelope"] = task_digest(envelope, BASIS)
        member = _tuned(envelope).get("member", {}).get(BASIS)
        for method, entry in reading["methods"].items():
            if task in entry["tasks"] and method in envelope["methods"]:
                entry["tasks"][task]["vs_tuned"] = method_digest(envelope, method, BASIS)
                if member in summary["methods"]:
                    entry["tasks"][task]["vs_tuned"] |= member_diversity(
                        summary["methods"][method], summary["methods"][member]
                    )
    for method, entry in reading["methods"].items():
        rows = [r for r in entry["tasks"].values() if "vs_tuned" in r]
        outside = [  # the tasks whose sweep the method is not a member of
            r["vs_tuned"]
            for task, r in entry["tasks"].items()
            if "vs_tuned" in r and method not in reading["tasks"][task]["envelope"]["members"]
        ]
        if not rows:
            continue
        gain = [r["vs_tuned"] for r in rows if not r.get("no_gain")]
        ratios = [math.inf if r["ratio"] is None else float(r["ratio"]) for r in gain]
        harder = [math.inf if r["harder_ratio"] is None else float(r["harder_ratio"]) for r in gain]
        spread = median_across_uncertainty([r["ratio_per_seed"] for r in gain]) if gain else None
        member = [r for r in gain if "member_ratio_per_seed" in r]
        member_ratios = [_inf(r["member_ratio"]) for r in member]
        complete = bool(member) and len(member) == len(gain)
        member_spread = (
            median_across_uncertainty([r["member_ratio_per_seed"] for r in member])
            if complete
            else None
        )
        entry["across"]["vs_tuned"] = {
            "tasks": len(rows),
            "gain_tasks": len(gain),
            "median_ratio": statistics.median(ratios) if ratios else None,
            "median_ratio_ci95": None if spread is None else spread["ci95"],
            "median_ratio_within_goal": None if spread is None else spread["within_goal"],
            "worst_ratio": max(ratios) if ratios else None,
            "median_harder_ratio": statistics.median(harder) if harder else None,
            "median_member_ratio": statistics.median(member_ratios) if complete else None,
            "median_member_ratio_ci95": None if member_spread is None else member_spread["ci95"],
            "worst_member_ratio": max(member_ratios) if complete else None,
            **_diversity_counts(rows),
            **final_gap_across(outside),
        }


def _diversity_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over the tasks read against the tuned member: on how many the method keeps its entropy
    and pass@8 and raises pass@8 (empty where neither was measured, or in a summary written
    before the member's diversity was read)."""
    read = [
        r["vs_tuned"]
        for r in rows
        if r["vs_tuned"].get("entropy_kept_vs_member") is not None
        and r["vs_tuned"].get("pass_kept_vs_member") is not None
    ]
    if not read:  # not measured (no eval/entropy or pass@8), or a summary from before
        return {}
    return {
        "diversity_tasks": len(read),
        **{key: sum(bool(r[key]) for r in read) for key in DIVERSITY_COUNTED},
    }


def suite_lines(reading: Mapping[str, Any]) -> list[str]:
    """The suite's Markdown against tuned on-policy (empty when no task declares a sweep): across
    tasks, per task who leads, per method and task beside the plain ratio."""
    tasks = {t: r["envelope"] for t, r in reading["tasks"].items() if "envelope" in r}
    if not tasks:
        return []
    base = reading["baseline"]
    lines = [
        "",
        f"Against tuned on-policy: `{base}` and its sweep, at each μ = 5 compute the best of "
        f"them (the envelope); compute to {base}'s final accuracy ÷ the envelope's, and to the "
        "best member's final accuracy (harder), medians over seeds.",
        "",
        "| method | median vs on-policy | median vs tuned [95% over seeds] | "
        f"resamples ≤ {MEDIAN_RATIO_GOAL}× | worst vs tuned | median vs best tuned final | "
        "median vs tuned member [95%] | worst vs tuned member | entropy · pass@8 kept vs tuned "
        "member (raised) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in reading["methods"].items():
        t = entry["across"].get("vs_tuned")
        if t is None:
            continue
        lines.append(
            f"| {method} | {_x(entry['across']['median_ratio'])} | "
            f"{_x(t['median_ratio'])}{_interval(t['median_ratio_ci95'])} | "
            f"{_share(t['median_ratio_within_goal'])} | {_x(t['worst_ratio'])} | "
            f"{_x(t['median_harder_ratio'])} | "
            f"{_x(t.get('median_member_ratio'))}{_interval(t.get('median_member_ratio_ci95'))} | "
            f"{_x(t.get('worst_member_ratio'))} | {_diversity_cell(t)} |"
        )
    lines += [
        "",
        f"| task | members (left out) | first to {base}'s final, per seed | {base} ÷ envelope "
        "| best final, per seed | on top along μ5 | tuned member |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, e in tasks.items():
        gone = f" ({', '.join(e['members_left_out'])})" if e["members_left_out"] else ""
        if e.get("unswept"):
            gone += f"; not swept: {', '.join(PLAYBOOK[k] for k in e['unswept'])}"
        seeds = e["seed_ids"]
        first = ", ".join(
            f"{s}: {m}" for s, m in zip(seeds, e["first_to_target_per_seed"], strict=True)
        )
        best = ", ".join(
            f"{s}: {m} {100 * a:.1f}%"
            for s, m, a in zip(
                seeds, e["best_member_per_seed"], e["best_final_per_seed"], strict=True
            )
        )
        leads = segments_text({"axis": e["leads"]})
        lines.append(
            f"| {task} | {len(e['members'])}{gone} | {first} | {_x(e['baseline_vs_tuned'])} | "
            f"{best} | {leads} | {e.get('tuned_member') or '—'} |"
        )
    lines += [
        "",
        "| method | task | vs on-policy | vs tuned [95%] | per seed vs tuned | first member "
        "| vs best tuned final | vs tuned member, per seed | entropy · pass@8 vs tuned member |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in reading["methods"].items():
        for task, r in entry["tasks"].items():
            v = r.get("vs_tuned")
            if v is None:
                continue
            per_seed = ", ".join(
                f"{s}: {_x(_inf(x))}"
                for s, x in zip(v["seed_ids"], v["ratio_per_seed"], strict=True)
            )
            plain = "no gain to save" if r.get("no_gain") else _x(r["ratio"])
            lines.append(
                f"| {method} | {task} | {plain} | {_x(_inf(v['ratio']))}{_interval(v['ratio_ci95'])} | "
                f"{per_seed} | {v['first_member']} | {_x(_inf(v['harder_ratio']))} | "
                f"{_member_cell(v)} | {_task_diversity_cell(v)} |"
            )
    return lines


def _diversity_cell(t: Mapping[str, Any]) -> str:
    """ "3/4 · 4/4 (2)": tasks keeping the tuned member's entropy, its pass@8, and raising it."""
    if "diversity_tasks" not in t:
        return "—"
    n = t["diversity_tasks"]
    entropy, kept, up = (t[key] for key in DIVERSITY_COUNTED)
    return f"{entropy}/{n} · {kept}/{n} ({up})"


def _task_diversity_cell(v: Mapping[str, Any]) -> str:
    """ "below · raised": one task's entropy and pass@8 against the tuned member's interval."""
    if "entropy_kept_vs_member" not in v:
        return "—"
    entropy = member_word(v["entropy_kept_vs_member"], v.get("entropy_raised_vs_member"))
    return f"{entropy} · {member_word(v['pass_kept_vs_member'], v['pass_raised_vs_member'])}"


def _inf(value: float | None) -> float:
    """A ratio as the tables print it: None (never reached on the median seed) as infinite."""
    return math.inf if value is None else float(value)


def _member_cell(v: Mapping[str, Any]) -> str:
    """ "0.61× (0.55×, 0.61×, 0.90×)": against the tuned member, median and per seed."""
    if "member_ratio_per_seed" not in v:
        return "—"
    per_seed = ", ".join(_x(_inf(x)) for x in v["member_ratio_per_seed"])
    return f"{_x(_inf(v['member_ratio']))} ({per_seed})"
