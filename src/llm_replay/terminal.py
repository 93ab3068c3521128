"""Running a training job in a terminal: a live progress bar and the summary table.

The CLI, `compare`, the comparison table, the TRL runner and the demo use these; the library's
runtimes only log. It sits below `cli/` so that none of them imports the command line.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def run_training(
    config: Any, *, resume: bool = False, show_progress: bool = True
) -> dict[str, Any]:
    """Train with a live progress bar (accuracy, reward, μ, buffer size); returns the summary."""
    from llm_replay.runtime import build_trainer

    trainer = build_trainer(config)
    state = {"accuracy": trainer.evals[-1]["eval/accuracy"] if trainer.evals else float("nan")}
    if not show_progress or not config.log.progress:
        return trainer.run(resume=resume)
    with _progress() as progress:
        bar = progress.add_task(
            config.name, total=config.train.iterations, status="evaluating base"
        )

        def update(tr: Any, record: dict[str, Any]) -> None:
            if "eval/accuracy" in record:
                state["accuracy"] = record["eval/accuracy"]
            mu = record.get("compute/mu")
            status = (
                (
                    f"acc {100 * state['accuracy']:.1f}%  reward {record['reward/mean']:.2f}  "
                    f"μ {mu:.2f}  "
                    if mu is not None
                    else ""
                )
                + f"buffer {int(record.get('buffer/size', 0))}  {record['compute/seconds']:.0f}s compute"
                + _async_status(record)
            )
            progress.update(bar, completed=tr.iteration, status=status)

        summary = trainer.run(resume=resume, on_iteration=update)
        progress.update(bar, completed=summary["iterations"])
    return summary


def _async_status(record: dict[str, Any]) -> str:
    """Utilisation of an async run: idle shares, rollouts in and samples out per second."""
    if "async/generator_idle_fraction" not in record:
        return ""
    return (
        f"  gen idle {100 * record['async/generator_idle_fraction']:.0f}%"
        f"  learner idle {100 * record['async/learner_idle_fraction']:.0f}%"
        f"  in {record['async/rollouts_in_per_s']:.0f}/s out {record['async/samples_out_per_s']:.0f}/s"
    )


def print_summary(summaries: list[dict[str, Any]]) -> None:
    table = Table(title="llm-replay")
    for column in ("run", "base acc", "final acc", "best acc", "steps", "compute s", "μ"):
        table.add_column(column, justify="right" if column != "run" else "left")
    for s in summaries:
        table.add_row(
            s["name"],
            f"{100 * s['base_accuracy']:.1f}%",
            f"{100 * s['final_accuracy']:.1f}%",
            f"{100 * s['best_accuracy']:.1f}%",
            str(s["steps"]),
            f"{s['compute_seconds']['total']:.1f}",
            "—" if s["mu"] is None else f"{s['mu']:.2f}",
        )
    console.print(table)
