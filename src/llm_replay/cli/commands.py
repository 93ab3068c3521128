"""`llm-replay train | eval | compare | report | presets | methods | losses | fields | inspect |
rescore | demo`: the terminal front end (the library itself only logs).

Errors a user can fix (bad config, bad dataset row or preference file, missing model, broken
checkpoint) are printed as one line naming the field, with exit status 2 — no traceback. Each is
one of `USER_ERRORS` or a subclass (a preference file's error is a `ConfigError`); a mistyped name
gets the nearest one (`config.parse.did_you_mean`).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from llm_replay import __version__
from llm_replay.buffer.checkpoint import CheckpointError
from llm_replay.config import ConfigError, load_config
from llm_replay.config.parse import did_you_mean
from llm_replay.data.rollout import InvalidRolloutError
from llm_replay.experiments.comparison_table import comparison_markdown, print_comparison
from llm_replay.metrics.logging import CORRECT_ROWS
from llm_replay.models import ModelLoadError
from llm_replay.tasks import TaskError
from llm_replay.terminal import console, print_summary, run_training

USER_ERRORS = (ConfigError, TaskError, ModelLoadError, CheckpointError, InvalidRolloutError)


def cmd_train(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    summary = run_training(config, resume=args.resume, show_progress=not args.quiet)
    print_summary([summary])
    console.print(f"summary: {config.run_dir / 'summary.json'}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from llm_replay.runtime.checkpoint import load_checkpoint_weights
    from llm_replay.runtime.components import Policy
    from llm_replay.runtime.layout import CHECKPOINT_DIR

    config = load_config(args.config, args.set)
    if args.checkpoint and not Path(args.checkpoint).exists():  # before the model loads
        raise CheckpointError(
            f"--checkpoint {args.checkpoint}: no such run or checkpoint directory"
        )
    if args.json and not Path(args.json).resolve().parent.is_dir():  # before the evaluation runs
        raise ConfigError(f"--json {args.json}: no directory {Path(args.json).resolve().parent}")
    policy = Policy.load(config)
    if args.checkpoint:
        source = Path(args.checkpoint)
        if source.name != CHECKPOINT_DIR and (source / CHECKPOINT_DIR).is_dir():
            source = source / CHECKPOINT_DIR
        load_checkpoint_weights(source, policy.model)
    evaluator = policy.evaluator(policy.generator(config.train.seed))
    metrics = evaluator(0)
    table = Table(title=f"eval: {args.checkpoint or config.model.path}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if key != CORRECT_ROWS:  # one verdict a row: in --json, not on screen
            table.add_row(key, f"{value:.4f}")
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(metrics, indent=1) + "\n")
    return 0


def _print_registry(
    args: argparse.Namespace,
    entries: list[dict[str, Any]],
    title: str,
    columns: tuple[str, ...],
    row: Callable[[dict[str, Any], str], tuple[str, ...]],
) -> int:
    """A registry listing (`methods`, `losses`): JSON with --json, else one table row an entry;
    `row(entry, knobs)` gets the entry's knobs already written as `name=default, ...`."""
    if args.json:
        print(json.dumps(entries, indent=1, default=str))
        return 0
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, overflow="fold", no_wrap=index == 0)  # names stay whole
    for entry in entries:
        knobs = ", ".join(f"{k['name']}={k['default']}" for k in entry["knobs"]) or "—"
        table.add_row(*row(entry, knobs))
    console.print(table)
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    from llm_replay.config.recipes import RECIPES
    from llm_replay.methods import describe

    def row(entry: dict[str, Any], knobs: str) -> tuple[str, ...]:
        if entry["kind"] == "recipe":
            return entry["name"] + " (recipe)", entry["description"], entry["paper"], "—", knobs
        kind = "" if entry["kind"] == "method" else " (option)"
        supports = "yes" if entry["supports_async"] else "no: " + entry["async_note"]
        return entry["name"] + kind, entry["description"], entry["paper"], supports, knobs

    entries = [recipe.describe() for recipe in RECIPES.values()] + describe()
    title = "recipes and replay methods (replay.method), options (replay.<option>)"
    columns = ("name", "what it does", "paper or evidence", "async", "knobs (default) or parts")
    return _print_registry(args, entries, title, columns, row)


def cmd_presets(args: argparse.Namespace) -> int:
    from llm_replay.config.files import Preset, presets

    if args.show:
        print(Preset.read(args.show).resolved_yaml(), end="")
        return 0
    shipped = presets()
    if args.json:
        entries = [
            {"name": p.name, "extends": p.extends, "summary": p.summary, "file": str(p.path)}
            for p in shipped
        ]
        print(json.dumps(entries, indent=1))
        return 0
    table = Table(title="presets: `llm-replay train NAME`, `extends: NAME`, `config: NAME`")
    table.add_column("name", no_wrap=True)
    table.add_column("extends", no_wrap=True)
    table.add_column("what it is", overflow="fold")
    for preset in shipped:
        table.add_row(preset.name, preset.extends or "—", preset.summary)
    console.print(table)
    console.print(
        "[dim]llm-replay presets --show NAME prints one with its extends merged in, to copy and "
        "edit[/]",
        highlight=False,
    )
    return 0


def cmd_losses(args: argparse.Namespace) -> int:
    from llm_replay.algorithms.losses import describe_losses
    from llm_replay.algorithms.losses.pairs import describe_pair_losses

    def row(entry: dict[str, Any], knobs: str) -> tuple[str, ...]:
        clip = entry["default_clip"]
        notes = [
            "a pair loss: preference.loss, with preference.enabled" if entry.get("kind") else "",
            f"clip ε default {clip[0]}/{clip[1]}" if clip else "",
            "needs π_prox (an extra forward pass)" if entry["needs_proximal"] else "",
            f"needs advantage {entry['advantage']}" if entry["advantage"] else "",
            "runs under TRL" if entry["trl"] else "",
        ]
        noted = "; ".join(n for n in notes if n) or "—"
        return entry["name"], entry["description"], entry["paper"], knobs, noted

    title = "policy losses (algorithm.loss) and pair losses (preference.loss), with their knobs"
    columns = ("name", "objective", "paper", "knobs (default)", "notes")
    entries = describe_losses() + describe_pair_losses()
    return _print_registry(args, entries, title, columns, row)


def cmd_compare(args: argparse.Namespace) -> int:
    from llm_replay.experiments.compare import load_experiment, parse_part, run_experiment
    from llm_replay.experiments.suite import is_suite

    part = parse_part(args.part)
    if is_suite(args.experiment):
        return _compare_suite(args, part)
    if args.tasks is not None:
        raise ConfigError(f"--tasks: {args.experiment} is not a suite (it has no tasks: mapping)")
    experiment = load_experiment(args.experiment, quick=args.quick, out=args.out)
    only = None if args.methods is None else [m for m in args.methods.split(",") if m]
    summary = run_experiment(experiment, progress=not args.quiet, part=part, only=only)
    if summary is None:
        console.print(
            f"done; no {experiment.baseline!r} run is finished yet, so there is nothing to "
            f"compare: `llm-replay report {args.experiment}` once the other runs end"
        )
        return 0
    print_comparison(summary)
    console.print(f"summary: {experiment.out / 'summary.json'}")
    for plot in summary["plots"]:
        console.print(f"plot: {plot}")
    return 0


def _compare_suite(args: argparse.Namespace, part: tuple[int, int]) -> int:
    from llm_replay.experiments.suite import load_suite, run_suite

    suite = load_suite(args.experiment, quick=args.quick, out=args.out)
    only = None if args.methods is None else [m for m in args.methods.split(",") if m]
    tasks = None if args.tasks is None else [t for t in args.tasks.split(",") if t]
    if tasks == []:
        raise ConfigError(f"--tasks {args.tasks!r}: names no task")
    run_suite(suite, progress=not args.quiet, part=part, only=only, tasks=tasks)
    return _report_suite(args, suite)


def _report_suite(args: argparse.Namespace, suite: Any) -> int:
    from llm_replay.experiments.across_tasks import suite_markdown
    from llm_replay.experiments.suite import report_suite

    reading = report_suite(suite, getattr(args, "baseline", None))
    print(suite_markdown(reading))
    if reading["waiting_tasks"]:
        console.print(f"no finished baseline run yet: {', '.join(reading['waiting_tasks'])}")
    if not getattr(args, "markdown", False):
        for plot in reading["plots"]:
            console.print(f"plot: {plot}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from llm_replay.experiments.compare import load_experiment, summarise, with_baseline
    from llm_replay.experiments.suite import is_suite, load_suite

    if is_suite(args.experiment):
        return _report_suite(args, load_suite(args.experiment, quick=args.quick, out=args.out))
    experiment = load_experiment(args.experiment, quick=args.quick, out=args.out)
    dest = None
    if args.baseline is not None:
        experiment = with_baseline(experiment, args.baseline)
        dest = experiment.out / f"against_{args.baseline}"
    summary = summarise(experiment, dest)
    if args.markdown:
        print(comparison_markdown(summary))
        return 0
    print_comparison(summary)
    for plot in summary["plots"]:
        console.print(f"plot: {plot}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from llm_replay.buffer import ReplayTable
    from llm_replay.buffer.stats import merge_stats
    from llm_replay.cli.inspect_table import (
        describe_table,
        plot_table,
        print_table_report,
        sharded_table_dirs,
    )

    path = Path(args.table)
    if not path.exists():
        raise CheckpointError(f"{path}: no such table directory")
    if args.rows < 0:
        raise ConfigError(f"--rows = {args.rows}: must be >= 0")
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        from llm_replay.models.loading import cannot_load, load_errors, resolve_model_path

        directory = resolve_model_path(args.tokenizer, field="--tokenizer")
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        except load_errors() as error:
            raise cannot_load("--tokenizer", args.tokenizer, error) from None
    shards = sharded_table_dirs(path)
    if shards:  # a sharded Ray table's checkpoint: one report per shard, then the total
        tables = [ReplayTable.read(shard) for shard in shards]
        reports = [describe_table(t, rows=args.rows, tokenizer=tokenizer) for t in tables]
        total = merge_stats([t.stats() for t in tables], name="sharded").to_dict()
        if args.json:
            print(json.dumps({"shards": reports, "total": total}, indent=1))
        else:
            for shard, report in zip(shards, reports, strict=True):
                print_table_report(shard, report)
            console.print(
                f"{len(shards)} shards: {total['size']} of {total['max_rollouts']} rollouts, "
                f"{total['num_tokens']} tokens, {total['inserts']} inserted, "
                f"{total['samples']} sampled"
            )
        if args.plots:
            for shard, table in zip(shards, tables, strict=True):
                for plot in plot_table(table, Path(args.plots) / shard.name):
                    console.print(f"plot: {plot}")
        return 0
    table = ReplayTable.read(path)
    report = describe_table(table, rows=args.rows, tokenizer=tokenizer)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_table_report(path, report)
    if args.plots:
        for plot in plot_table(table, Path(args.plots)):
            console.print(f"plot: {plot}")
    return 0


def cmd_rescore(args: argparse.Namespace) -> int:
    from llm_replay.rescore import rescore_directory

    path = Path(args.table)
    if not path.exists():
        raise CheckpointError(f"{path}: no such table directory")
    config = load_config(args.config, args.set)
    try:
        report = rescore_directory(path, config, dry_run=args.dry_run)
    except ValueError as error:  # a rollout whose prompt is not one of the task's problems
        raise ConfigError(str(error)) from None
    console.print(
        f"{'would rescore' if args.dry_run else 'rescored'} {report.rollouts} rollouts in "
        f"{report.groups} groups: {report.changed_rewards} rewards changed, mean "
        f"{report.mean_reward_before} → {report.mean_reward_after}"
        + (
            f"; {report.partial_groups} groups have members evicted"
            if report.partial_groups
            else ""
        ),
        highlight=False,
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from llm_replay.cli.demo import CONFIGS, run_demo

    configs = {**CONFIGS, "replay": args.replay} if args.replay else None
    run_demo(Path(args.out), quick=args.quick, configs=configs)
    return 0


def cmd_fields(args: argparse.Namespace) -> int:
    from llm_replay.config.describe import config_fields

    every = config_fields()
    chosen = [f for f in every if f.name.startswith(args.prefix)]
    if not chosen:
        sections = {f.name.rsplit(".", k)[0] for f in every for k in range(f.name.count(".") + 1)}
        raise ConfigError(
            f"prefix = {args.prefix!r}: no config field starts with it"
            + did_you_mean(args.prefix, sorted(sections))
        )
    for f in chosen:
        console.print(f"[bold]{f.name}[/] = {f.default!r}  [dim]{f.type}[/]", highlight=False)
        console.print(f"    {escape(f.help)}", highlight=False)
    console.print(
        "[dim]replay.* knobs: llm-replay methods; algorithm.* loss knobs: llm-replay losses[/]",
        highlight=False,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-replay", description="Experience replay for LLM RL.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a policy from a YAML config")
    train.add_argument("config", help="a preset's name (`llm-replay presets`) or a YAML file")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override")
    train.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=cmd_train)
    ev = sub.add_parser("eval", help="evaluate a model or a run's checkpoint on the eval split")
    ev.add_argument("config", help="a preset's name or a YAML file naming the model and task")
    ev.add_argument("--checkpoint", help="a run directory or its checkpoint/ to load weights from")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument(
        "--json",
        help="also write the metrics to this JSON file, with each row's verdict (eval_correct_rows)",
    )
    ev.set_defaults(func=cmd_eval)
    for name, func, text in (
        ("compare", cmd_compare, "run methods × seeds on one compute budget; summary + plots"),
        ("report", cmd_report, "redraw a comparison's summary and plots from its run logs"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("experiment", help="experiment YAML (see configs/experiment.yaml)")
        cmd.add_argument("--quick", action="store_true", help="the experiment's reduced version")
        cmd.add_argument("--out", help="output directory (default: the experiment's `out`)")
        if name == "report":
            cmd.add_argument("--markdown", action="store_true", help="print a Markdown table")
            cmd.add_argument(
                "--baseline",
                metavar="METHOD",
                help="compare against this method instead of the experiment's baseline; "
                "summary and plots go to OUT/against_METHOD/",
            )
        if name == "compare":
            cmd.add_argument("--quiet", action="store_true", help="no progress bars")
            cmd.add_argument(
                "--part",
                default="1/1",
                metavar="I/N",
                help="run only the I-th of N disjoint shares of the runs (one process per core)",
            )
            cmd.add_argument(
                "--methods",
                metavar="A,B",
                help="run only these methods' runs (e.g. one added to an experiment under way)",
            )
            cmd.add_argument(
                "--tasks",
                metavar="A,B",
                help="a suite: run only these tasks' runs (--part splits what is left)",
            )
        cmd.set_defaults(func=func)
    fields = sub.add_parser("fields", help="list every config field with its default and help")
    fields.add_argument("prefix", nargs="?", default="", help="only these, e.g. generation")
    fields.set_defaults(func=cmd_fields)
    presets = sub.add_parser("presets", help="list the shipped presets, or print one whole")
    presets.add_argument("--show", metavar="NAME", help="print preset NAME resolved, as YAML")
    presets.add_argument("--json", action="store_true", help="print the list as JSON")
    presets.set_defaults(func=cmd_presets)
    methods = sub.add_parser("methods", help="list the replay methods, their papers and knobs")
    methods.add_argument("--json", action="store_true", help="print the registry as JSON")
    methods.set_defaults(func=cmd_methods)
    losses = sub.add_parser(
        "losses", help="list the policy and pair losses, their papers and knobs"
    )
    losses.add_argument("--json", action="store_true", help="print the registry as JSON")
    losses.set_defaults(func=cmd_losses)
    inspect = sub.add_parser("inspect", help="what a saved or durable replay table holds")
    inspect.add_argument("table", help="a table directory (ReplayTable.save or ReplayTable.open)")
    inspect.add_argument("--tokenizer", help="decode rows with this model's tokenizer")
    inspect.add_argument("--rows", type=int, default=3, help="rows to show (default 3)")
    inspect.add_argument("--plots", metavar="OUT", help="write histogram PNGs to OUT")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.set_defaults(func=cmd_inspect)
    rescore = sub.add_parser("rescore", help="re-score a stored table with a config's task")
    rescore.add_argument("table", help="a table directory (ReplayTable.save or ReplayTable.open)")
    rescore.add_argument(
        "config", help="a preset or YAML file naming the task, model (tokenizer), advantage"
    )
    rescore.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    rescore.add_argument("--dry-run", action="store_true", help="report, change nothing")
    rescore.set_defaults(func=cmd_rescore)
    demo = sub.add_parser("demo", help="train with replay and on-policy, compare, plot")
    demo.add_argument("--out", default="runs/demo", help="output directory")
    demo.add_argument("--quick", action="store_true", help="a few iterations only (smoke test)")
    demo.add_argument(
        "--replay",
        default=None,
        help="the replay run's config (default auto, the recommended default; any preset or "
        "config file)",
    )
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("transformers", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # the base install (`report`, `methods`) has no transformers
        pass
    else:
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        return int(args.func(args))
    except USER_ERRORS as error:
        console.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return 130
