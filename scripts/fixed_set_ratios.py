"""Compute ratios of an experiment's rows against a reference row that is not its baseline.

`llm-replay report` pairs every row with the experiment's baseline seed by seed. The fixed-train-set
rows of issue #28 also need reading against their own on-policy run (`fixed_on_policy`), which has
fewer seeds. Each row's runs are read from the experiment's run directory (restore the archive with
`llm-replay report` first). The target is the reference row's median final smoothed accuracy.
Printed for each row: the median over seeds of the compute at which a seed first reaches the
target, divided by the reference's median compute to reach it, on each basis. A seed that never
reaches the target counts as infinite.

    python scripts/fixed_set_ratios.py configs/experiment.yaml fixed_on_policy \
        fixed_positive_anneal_skip fixed_positive_schedule_skip
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from llm_replay.experiments.analysis import RunCurves
from llm_replay.experiments.compare import Experiment, load_experiment

BASES = ("mu_5", "rollouts")


def seeds_of(experiment: Experiment, row: str) -> list[RunCurves]:
    runs = []
    for seed in experiment.seeds_of(experiment.method(row)):
        run_dir = Path(experiment.run_dir(row, seed))
        if (run_dir / "summary.json").is_file():
            runs.append(RunCurves.load(run_dir))
    if not runs:
        raise SystemExit(f"{row}: no finished run under the experiment's run directory")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("reference", help="the row whose median final accuracy is the target")
    parser.add_argument("rows", nargs="+")
    args = parser.parse_args()
    experiment = load_experiment(args.experiment)
    reference = seeds_of(experiment, args.reference)
    target = float(np.median([run.smoothed[-1] for run in reference]))
    print(f"target: {args.reference}'s median final accuracy {target:.1%} ({len(reference)} seeds)")
    base = {b: np.median([r.reach(target, b) or math.inf for r in reference]) for b in BASES}
    for row in [args.reference, *args.rows]:
        runs = seeds_of(experiment, row)
        cells = []
        for basis in BASES:
            ratios = [(r.reach(target, basis) or math.inf) / base[basis] for r in runs]
            cells.append(f"{basis} {np.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")
        finals = ", ".join(f"{r.smoothed[-1]:.1%}" for r in runs)
        print(f"{row} ({len(runs)} seeds; final {finals}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
