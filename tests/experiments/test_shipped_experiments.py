"""Every shipped experiment file still describes the runs archived under it: each row's settings,
as `compare` builds them today, are those its archived run was made with (`report` restores an
archived run only then, so a preset or a default that drifted would leave a reading that no
longer reproduces). One archived seed per row and task: a row's seeds differ by their seed alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_replay.experiments.archive import PROTOCOL_FILE, archived_dir, protocol_differences
from llm_replay.experiments.compare import Experiment, protocol_of, run_config
from llm_replay.experiments.experiment_file import load_experiment, read_experiment_file
from llm_replay.experiments.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "configs").glob("experiment*.yaml"))


def _experiments(path: Path) -> list[Experiment]:
    if "tasks" in read_experiment_file(path):
        return list(load_suite(path).tasks.values())
    return [load_experiment(path)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_archived_row_is_the_row_the_file_builds(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    checked = 0
    experiments = [e for e in _experiments(path) if e.archive is not None]
    for experiment in experiments:
        for method in experiment.methods:
            for seed in experiment.seeds_of(method):
                archived = archived_dir(experiment.archive, method.name, seed) / PROTOCOL_FILE
                if archived.is_file():
                    current = protocol_of(run_config(experiment, method, seed))
                    differing = protocol_differences(json.loads(archived.read_text()), current)
                    assert differing == [], f"{experiment.name} {method.name} seed {seed}"
                    checked += 1
                    break
    if experiments:
        assert checked, f"{path.name}: an archive, and no row of it archived"
