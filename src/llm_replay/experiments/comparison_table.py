"""The comparison table that `llm-replay compare` and `report` print: a rich table for the terminal,
the same cells as Markdown for docs/RESULTS.md, and the note under both on whether the baseline
ended on its plateau (which decides what the ratios mean)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from llm_replay.experiments import envelope as tuned
from llm_replay.experiments.guard_reading import guard_lines
from llm_replay.experiments.tuned_member import diversity_line
from llm_replay.terminal import console


def _ratio_cell(ratio: float | None, interval: list[float | None] | None) -> str:
    """`0.45× [0.40–0.52]`: the median ratio over seeds and its bootstrap 95% interval."""
    text = "never" if ratio is None else f"{ratio:.2f}×"
    if interval is not None:
        low, high = (("∞" if b is None else f"{b:.2f}") for b in interval)
        text += f" [{low}–{high}]"
    return text


def plateau_note(summary: dict[str, Any]) -> str | None:
    """One sentence on whether the baseline ended on its plateau, which decides what its ratios
    mean; None for summaries written before the verdict was recorded or too short to tell."""
    verdict = summary.get("baseline_plateau") or {}
    if verdict.get("on_plateau") is None:
        return None
    name, slope, flat = summary["baseline"], verdict["tail_slope"], verdict["threshold"]
    seeds = sum(s is not None for s in verdict["per_seed"])
    bounds = verdict.get("tail_slope_ci95")
    interval = None if not bounds or None in bounds else (float(bounds[0]), float(bounds[1]))
    spread = "" if interval is None else f", 95% interval {interval[0]:+.2f} to {interval[1]:+.2f}"
    measured = (
        f"{slope:+.2f} accuracy points per tenth of the run over its last 20% "
        f"(median of {seeds} seed{'s' if seeds != 1 else ''}{spread}; flat is ≤ {flat:g})"
    )
    straddles = interval is not None and interval[0] <= flat < interval[1]
    doubt = (
        " The interval spans the threshold, so this reading is weak: a continued run decides."
        if straddles
        else ""
    )
    if verdict["on_plateau"]:
        return f"The baseline {name} ends on its plateau: {measured}.{doubt}"
    return (
        f"The baseline {name} is still rising at the end of its budget: {measured}. The ratios "
        "measure how fast each method reaches its final accuracy, not its plateau; continue it "
        f"to a larger budget with `extends:` (docs/compare.md, 'Locating a baseline's plateau').{doubt}"
    )


def print_comparison(summary: dict[str, Any]) -> None:
    """Per method: seeds, final accuracy (median, min–max), accuracy points above the baseline at
    equal μ = 5 compute, pass@8, entropy, the slope of the last
    20% of the run (points per tenth of the budget), the plateau fit (share of a fitted
    exponential rise reached by the end → its asymptote), μ, sampled age, reuse y (completion
    tokens trained per token generated), and the ratios with their bootstrap 95% intervals."""
    bases = summary["experiment"]["bases"]
    table = Table(
        title=f"{summary['experiment']['name']}: compute to reach the baseline's final accuracy "
        f"({100 * summary['target_accuracy']:.1f}%), ÷ baseline"
    )
    table.add_column("method")
    columns = ["seeds", "final acc", "Δ acc at equal μ5", "pass@8", "entropy", "tail slope"]
    columns += ["plateau fit", "μ"]
    for column in (*columns, "age", "y", *bases, *_tuned_head(summary, short=True)):
        table.add_column(column, justify="right")
    for name, m in summary["methods"].items():
        ratios = m["compute_to_target_ratio"]
        pass8 = m.get("pass@8", {}).get("median")
        slope = m.get("tail_slope_mu_5")
        table.add_row(
            name,
            str(m["seeds"]),
            f"{100 * m['final_accuracy']['median']:.1f}% ({100 * m['final_accuracy']['min']:.0f}–"
            f"{100 * m['final_accuracy']['max']:.0f})",
            _gain_cell(m),
            "—" if pass8 is None else f"{100 * pass8:.0f}%",
            f"{m['entropy']['median']:.3f}",
            "—" if slope is None else f"{slope:+.2f}",
            _saturation_cell(m),
            "—" if m["mu_measured"] is None else f"{m['mu_measured']:.2f}",
            "—" if m["mean_sampled_age"] is None else f"{m['mean_sampled_age']:.1f}",
            _reuse_cell(m),
            *(
                _ratio_cell(ratios[b], m.get("compute_to_target_ratio_ci95", {}).get(b))
                for b in bases
            ),
            *_tuned_cells(summary, name, short=True),
        )
    console.print(table)
    note = plateau_note(summary)
    if note is not None:
        console.print(note, markup=False)
    if summary.get("envelope"):
        console.print("\n".join(tuned.note_lines(summary["envelope"])), markup=False)
        diversity = diversity_line(summary, tuned.basis_of(summary["envelope"]))
        if diversity is not None:
            console.print(diversity, markup=False)
    if summary.get("members"):
        from llm_replay.experiments.members import members_markdown

        console.print("\n" + members_markdown(summary["members"]), markup=False)


def _tuned_head(summary: dict[str, Any], short: bool = False) -> list[str]:
    """The columns against tuned on-policy (issue #53), where the experiment declares a sweep."""
    reading = summary.get("envelope")
    if not reading:
        return []
    basis = tuned.basis_of(reading)
    member = (reading.get("tuned_member") or {}).get("member", {}).get(basis)
    head = [f"vs tuned on-policy {basis}", "first member"]
    if member is not None:
        head.append(f"vs {member} {basis}")
    return head if short else [*head, f"vs best tuned final {basis}"]


def _tuned_cells(summary: dict[str, Any], name: str, short: bool = False) -> list[str]:
    """The ratio against the sweep's envelope with its interval, the members that reached the
    baseline's final accuracy first on this method's seeds, and (Markdown) the ratio to the best
    member's final accuracy."""
    reading = summary.get("envelope")
    if not reading:
        return []
    entry, basis = reading["methods"].get(name), tuned.basis_of(reading)
    if entry is None:
        return ["—"] * len(_tuned_head(summary, short))
    cells = [
        _ratio_cell(entry[kind]["ratio"][basis], entry[kind]["ratio_ci95"][basis])
        for kind in tuned.TARGETS
    ]
    cells.insert(1, tuned.leaders_cell(reading, name))
    member = (reading.get("tuned_member") or {}).get("methods", {}).get(name)
    if member is not None:
        cells.insert(2, _ratio_cell(member["ratio"][basis], member["ratio_ci95"][basis]))
    return cells[:-1] if short else cells  # short: without the harder target


def _saturation_cell(method: dict[str, Any]) -> str:
    """ "97% → 61.2%": the share of the fitted exponential rise reached by the end of the budget,
    and the fitted asymptote (medians over seeds)."""
    fit = method.get("saturation_mu_5")
    if not fit:
        return "—"
    return f"{100 * fit['rise_done']:.0f}% → {100 * fit['asymptote']:.1f}%"


def _reuse_cell(method: dict[str, Any]) -> str:
    """y, completion tokens trained per token generated (median over seeds); summaries written
    before it was measured have none."""
    reuse = method.get("reuse", {}).get("median")
    return "—" if reuse is None or reuse != reuse else f"{reuse:.2f}"


def _gain_cell(method: dict[str, Any]) -> str:
    """ "+9.1 [+7.5, +10.2]": accuracy points above the baseline at the same μ = 5 compute (where
    the shorter run ended), median over seeds with its bootstrap 95% interval."""
    gain = method.get("accuracy_gain_equal_mu_5")
    return "—" if not gain else _spread_cell(gain, "{:+.1f}", " [{:+.1f}, {:+.1f}]")


def _percent_cell(spread: dict[str, Any]) -> str:
    return _spread_cell(spread, "{:.0f}%", " [{:.0f}–{:.0f}]")


def _spread_cell(spread: dict[str, Any], median: str, interval: str) -> str:
    """A fraction's median and bootstrap interval in points, each through its format."""
    text = median.format(100 * spread["median"])
    bounds = spread.get("ci95")
    if bounds and None not in bounds:
        text += interval.format(100 * bounds[0], 100 * bounds[1])
    return text


def comparison_markdown(summary: dict[str, Any]) -> str:
    """The comparison as a Markdown table (what docs/RESULTS.md shows), same cells as the
    terminal table; the unfinished runs are listed under it."""
    bases = summary["experiment"]["bases"]
    head = ["method", "seeds", "final acc (min–max)", "Δ acc at equal μ5", "worst Δ vs band"]
    head += ["pass@8", "entropy", "tail slope", "plateau fit", "age", "y"]
    head += [f"ratio {b}" for b in bases] + _tuned_head(summary)
    lines = ["| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    for name, m in summary["methods"].items():
        acc = m["final_accuracy"]
        pass8 = m.get("pass@8", {})
        slope = m.get("tail_slope_mu_5")
        cells = [
            name,
            str(m["seeds"]),
            f"{100 * acc['median']:.1f}% ({100 * acc['min']:.1f}–{100 * acc['max']:.1f})",
            _gain_cell(m),
            "—" if m.get("worst_margin_mu_5") is None else f"{m['worst_margin_mu_5']:+.1f}",
            "—" if not pass8 else _percent_cell(pass8),
            f"{m['entropy']['median']:.3f}",
            "—" if slope is None else f"{slope:+.2f}",
            _saturation_cell(m),
            "—" if m["mean_sampled_age"] is None else f"{m['mean_sampled_age']:.1f}",
            _reuse_cell(m),
            *(
                _ratio_cell(
                    m["compute_to_target_ratio"][b],
                    m.get("compute_to_target_ratio_ci95", {}).get(b),
                )
                for b in bases
            ),
            *_tuned_cells(summary, name),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += reward_model_lines(summary)
    guard = guard_lines(summary)
    if guard:
        lines += ["", *guard]
    note = plateau_note(summary)
    if note is not None:
        lines.append(f"\n{note}")
    if summary.get("envelope"):
        lines += ["", *tuned.note_lines(summary["envelope"])]
        diversity = diversity_line(summary, tuned.basis_of(summary["envelope"]))
        if diversity is not None:
            lines.append(diversity)
    if summary.get("members"):  # a mixture: each member read as a task
        from llm_replay.experiments.members import members_markdown

        lines += ["", members_markdown(summary["members"])]
    missing = summary["experiment"].get("unfinished_runs") or []
    if missing:
        lines.append(f"\nNot finished yet ({len(missing)}): " + ", ".join(missing))
    return "\n".join(lines)


def reward_model_lines(summary: dict[str, Any]) -> list[str]:
    """With a learned reward model, a second table: what it cost, and what it and the verifier
    said of the fresh rollouts over the last fifth of the run (their difference: reward hacking
    where positive)."""
    rows = {n: m for n, m in summary["methods"].items() if "reward_model_share_mu_5" in m}
    if not rows:
        return []

    def cell(value: float | None, percent: bool = True) -> str:
        return "—" if value is None else (f"{100 * value:.1f}%" if percent else f"{value:+.3f}")

    lines = [
        "",
        "| method | reward model share of μ5 cost | reward-model success, last fifth | "
        "verifier correct, last fifth | difference |",
        "|---|---|---|---|---|",
    ]
    for name, m in rows.items():
        success, verified = m["reward_model_success_late"], m["verifier_correct_late"]
        gap = None if success is None or verified is None else success - verified
        lines.append(
            f"| {name} | {cell(m['reward_model_share_mu_5'])} | {cell(success)} | "
            f"{cell(verified)} | {cell(gap, percent=False)} |"
        )
    return lines
