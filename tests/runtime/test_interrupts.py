"""Ctrl-C anywhere, crashes at any save step, broken checkpoints: nothing lost, no traceback.

The reference is an uninterrupted run; every interrupted-then-resumed run must log exactly the
same records (train and eval, in order), whenever the interrupt landed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from llm_replay.config.files import PRESETS_DIR
from llm_replay.metrics import read_log
from llm_replay.runtime import SyncTrainer
from llm_replay.runtime.checkpoint import open_checkpoint
from tests.conftest import ROOT, tiny_config, tiny_sets
from tests.runtime.test_sync import DETERMINISTIC

PRESET = PRESETS_DIR / "uniform.yaml"
ARGS = ("train.iterations=4", "log.checkpoint_every=1")


def records(run_dir: Path) -> list[tuple[Any, ...]]:
    return [
        (r["kind"], r["iteration"], *(r.get(k) for k in DETERMINISTIC)) for r in read_log(run_dir)
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    run_dir = tmp_path_factory.mktemp("reference")
    SyncTrainer(tiny_config(PRESET, run_dir, *ARGS)).run()
    logged = records(run_dir)
    assert [(k, i) for k, i, *_ in logged if k == "eval"] == [("eval", 0), ("eval", 2), ("eval", 4)]
    return logged


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


class Trainer(SyncTrainer):
    """A SyncTrainer that presses Ctrl-C (or raises) at a chosen moment."""

    at: tuple[str, int] = ("", -1)
    presses = 1
    raw = False  # raise KeyboardInterrupt directly instead of sending SIGINT

    def _fire(self, where: str) -> None:
        if (where, self.iteration) == self.at:
            self.at = ("", -1)
            if self.raw:
                raise KeyboardInterrupt
            for _ in range(self.presses):
                ctrl_c()

    def evaluate(self) -> dict[str, float]:
        self._fire("evaluate")
        return super().evaluate()

    def train_iteration(self) -> dict[str, Any]:
        self._fire("train")
        return super().train_iteration()

    def save_checkpoint(self) -> Path:
        self._fire("save")
        return super().save_checkpoint()


@pytest.fixture
def default_sigint() -> Any:
    """Python's own SIGINT handler for the test, whatever the shell gave pytest (a job started
    in the background with `&` inherits SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("where", "iteration", "presses", "raw"),
    [
        ("evaluate", 2, 1, False),  # used to save without iteration 2's evaluation
        ("evaluate", 2, 1, True),  # an interrupt that bypasses the handler: eval_pending
        ("evaluate", 2, 2, False),  # a second Ctrl-C aborts at once
        ("train", 3, 1, False),  # mid-iteration: the iteration finishes first
        ("save", 2, 1, False),  # during a save
        ("save", 3, 2, False),  # abort during a save: the previous checkpoint stands
        ("evaluate", 0, 1, False),  # during the base evaluation
    ],
)
def test_ctrl_c_anywhere_then_resume_logs_the_uninterrupted_run(
    default_sigint: None,
    reference: list[tuple[Any, ...]],
    tmp_path: Path,
    where: str,
    iteration: int,
    presses: int,
    raw: bool,
) -> None:
    config = tiny_config(PRESET, tmp_path / "run", *ARGS)
    trainer = Trainer(config)
    trainer.at, trainer.presses, trainer.raw = (where, iteration), presses, raw
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    SyncTrainer(config).run(resume=True)
    assert records(tmp_path / "run") == reference
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")) == []


@pytest.fixture
def checkpointed(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    SyncTrainer(tiny_config(PRESET, run_dir, "train.iterations=2")).run()
    return run_dir


def forge_done(checkpoint: Path) -> None:
    from llm_replay.buffer.checkpoint import _write_done

    (checkpoint / "DONE").unlink()
    _write_done(checkpoint)


def _edit_state(checkpoint: Path, change: Any) -> None:
    state = json.loads((checkpoint / "state.json").read_text())
    change(state)
    (checkpoint / "state.json").write_text(json.dumps(state))


DAMAGE = {
    "model_truncated": lambda c: (c / "model.safetensors").write_bytes(
        (c / "model.safetensors").read_bytes()[:100]
    ),
    "model_empty": lambda c: (c / "model.safetensors").write_bytes(b""),
    "model_pickle": lambda c: (c / "model.safetensors").write_bytes(b"\x80\x04\x95" + b"\x00" * 64),
    "optimizer_truncated": lambda c: (c / "optimizer.safetensors").write_bytes(
        (c / "optimizer.safetensors").read_bytes()[:50]
    ),
    "state_missing_key": lambda c: _edit_state(c, lambda s: s.pop("iteration")),
    "state_wrong_type": lambda c: _edit_state(c, lambda s: s.update(evals="many")),
    "state_not_json": lambda c: (c / "state.json").write_text("{"),
    "method_state_missing": lambda c: (c / "replay" / "method.json").unlink(),
    "replay_npy_empty": lambda c: next(
        (c / "replay" / "table" / "arrays").glob("*.npy")
    ).write_bytes(b""),
    "done_missing": lambda c: (c / "DONE").unlink(),
}


@pytest.mark.parametrize("forged", [False, True])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_broken_checkpoint_is_one_line_error_and_nothing_is_written(
    checkpointed: Path,
    damage: str,
    forged: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llm_replay.cli import main

    checkpoint = checkpointed / "checkpoint"
    DAMAGE[damage](checkpoint)
    if forged and damage != "done_missing":
        forge_done(checkpoint)  # past the checksums: the readers themselves must refuse
    before = {p: p.read_bytes() for p in checkpointed.rglob("*") if p.is_file()}
    monkeypatch.chdir(ROOT)
    args = ["train", str(PRESET), "--resume", "--quiet"]
    args += [f"--set={item}" for item in (*_tiny(), f"log.run_dir={checkpointed}")]
    assert main(args) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: ") and out.count("\n") == 1 and "Traceback" not in out, out
    after = {p: p.read_bytes() for p in checkpointed.rglob("*") if p.is_file()}
    assert after == before, "a failed resume changed the run directory"


def _tiny() -> list[str]:
    return tiny_sets(PRESET, "train.iterations=2")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_at_every_step_of_a_training_checkpoint_save(tmp_path: Path) -> None:
    from tests.crash import count_steps, kill_at_step

    config = tiny_config(PRESET, tmp_path / "run", "train.iterations=1")
    trainer = SyncTrainer(config)
    trainer.run()
    target = tmp_path / "run" / "checkpoint"
    pristine = tmp_path / "pristine"
    shutil.copytree(target, pristine)
    trainer.iteration += 1  # a different state to save
    steps = count_steps(trainer.save_checkpoint)
    seen = set()
    resumed = SyncTrainer(config)
    for k in range(steps):
        for path in [target, *target.parent.glob(".checkpoint.*")]:
            shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(pristine, target)
        killed, _ = kill_at_step(k, trainer.save_checkpoint)
        assert killed
        _, state = open_checkpoint(target)  # resolves and verifies every file's checksum
        seen.add(state["iteration"])
        resumed.load_checkpoint()  # model, optimizer, RNG, table: all of it reads back
        assert resumed.iteration == state["iteration"]
    assert seen == {1, 2}
