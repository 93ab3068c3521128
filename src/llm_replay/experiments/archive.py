"""Compact copies of finished runs, for committing an experiment's results as they come in.

A long comparison runs over several sessions and machines. `archive_run` copies a finished run's
`summary.json` and a gzipped `metrics.jsonl` holding every evaluation record and, of the training
records, only the keys the summaries and plots read (`TRAIN_KEYS`): tens of KB per run instead of
a megabyte. `restore_run` writes them back into an empty run directory, so `compare` counts the run
as done and `report` redraws from it. Archives hold JSON only, written atomically. When a key
joins `TRAIN_KEYS`, archiving again from a machine that still has the full log brings the
archived run up to date; an archived run whose summary differs from the local one is another run
and is never overwritten.

An archived run also keeps its *protocol* (`protocol.json`: the run's resolved config less its
logging section), and a restore refuses a run whose protocol differs from what the experiment
would run now in any setting both name: an archive made at another budget, task or reward is
never silently counted as finished. Settings only one side names (a config key added since) are
not compared, so archives from before a new option keep restoring.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llm_replay.metrics.logging import read_log
from llm_replay.runtime.layout import METRICS_FILE, SUMMARY_FILE

ARCHIVED_METRICS = "metrics.jsonl.gz"
PROTOCOL_FILE = "protocol.json"
Fingerprint = Callable[[], dict[str, str]]
"""Content hashes of what a run trains on (`experiments/fingerprint.py`), asked for lazily."""
TRAIN_KEYS = (
    "kind",
    "iteration",
    "steps",
    "train/age_mean",
    "train/age_max",
    "train/replayed_fraction",
    "train/rollouts",
    "buffer/stored_reuse_mean",
    "buffer/sampled_age_mean",
    "replay/auto_ratio",
    "replay/auto_rho",
    "replay/auto_rho_per_step",
    "loss/kl_behaviour",
    "loss/clip_fraction",
    "loss/bapo_low",
    "loss/bapo_high",
    "loss/bapo_positive_share",
    "generation/entropy",
    "compute/mu",
    "reward/mean",
    "reward/zero_variance_groups",
    "anneal/scale",
    "anneal/entropy",
    "anneal/reward_gain",
    "anneal/pressed_entropy",
    "anneal/pressed_plateau",
    "anneal/pressed_m2",
    "anneal/pressed_clip",
    "guard/value",
    "guard/error",
    "guard/off",
    "guard/readings",
    "loss/replay_cosine",
    "bandit/p_replay",
    "bandit/arm",
    "bandit/advantage",
    "signals/cov_fresh",
    "signals/cov_replayed",
    "balance/scale",
    "retire/prompts",
    "skip/rate",
    "skip/retest_informative_share",
    "signals/log_ratio_m2",
    "signals/stale_fraction",
    "signals/progress",
    "reward/correct_rate",
    "reward/verifier_correct_rate",
    "reward_model/agreement",
    "reward_model/version",
    "stale_rewards/stale",
    "stale_rewards/evicted",
    "stale_rewards/rescored",
    "stale_rewards/discount",
    "compute/reward_model_cost",
    "adaptive/rollouts_per_prompt",
    "adaptive/unsolved",
    "adaptive/reused",
    "adaptive/reused_total",
    "loss/head_grad_norm",
    "loss/gated",
)


def archived_dir(archive: Path, method: str, seed: int) -> Path:
    return Path(archive) / method / f"seed-{seed}"


def compact_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every non-training record whole; training records cut to `TRAIN_KEYS`."""
    out = []
    for record in records:
        if record.get("kind") == "train":
            record = {k: v for k, v in record.items() if k in TRAIN_KEYS}
        out.append(record)
    return out


class ArchiveMismatch(ValueError):
    """An archived run was made under another protocol than the experiment's."""


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


RENAMED = {("replay.method", "auto"): "compute_optimal"}
"""Settings whose value was renamed since runs were archived, read as their new name: the
compute-optimal method was `auto` until issue #28 gave that name to the recommended recipe (a
recipe resolves to its method, so no run made since records `auto`)."""


def protocol_differences(archived: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key: archived -> current` for every setting both name and that differs (archived values
    renamed since are read under their new name, `RENAMED`)."""
    old, new = flatten(archived), flatten(current)
    old = {
        key: RENAMED.get((key, value), value) if isinstance(value, str) else value
        for key, value in old.items()
    }
    return [
        f"{key}: {old[key]!r} -> {new[key]!r}"
        for key in sorted(old.keys() & new.keys())
        if old[key] != new[key]
    ]


def archive_run(
    run_dir: Path,
    archive: Path,
    method: str,
    seed: int,
    protocol: dict[str, Any] | None = None,
    fingerprint: Fingerprint | None = None,
) -> Path | None:
    """Copy a finished run (its summary exists) into the archive; None if nothing was written.
    A newly archived run's protocol gains `fingerprint()` under `fingerprint` (computed only
    then: it may build the task).

    A run archived already is rewritten only to add keys: when its summary is the local one's and
    the local log, compacted, holds every archived record with more keys (`TRAIN_KEYS` has grown
    and this machine still has the full log). A different run archived under the same method and
    seed, or a local run restored from an older archive, never overwrites what is there."""
    run_dir = Path(run_dir)
    target = archived_dir(archive, method, seed)
    if not (run_dir / SUMMARY_FILE).is_file():
        return None
    summary = (run_dir / SUMMARY_FILE).read_bytes()
    records = compact_records(read_log(run_dir))
    lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    metrics = gzip.compress(lines.encode(), mtime=0)
    if (target / SUMMARY_FILE).is_file():
        if (target / SUMMARY_FILE).read_bytes() != summary or not _adds_keys(
            target / ARCHIVED_METRICS, records
        ):
            return None
        _atomic_write(target / ARCHIVED_METRICS, metrics)
        return target
    target.mkdir(parents=True, exist_ok=True)
    _atomic_write(target / ARCHIVED_METRICS, metrics)
    if protocol is not None:
        if fingerprint is not None:
            protocol = {**protocol, "fingerprint": fingerprint()}
        text = json.dumps(protocol, sort_keys=True, indent=1) + "\n"
        _atomic_write(target / PROTOCOL_FILE, text.encode())
    _atomic_write(target / SUMMARY_FILE, summary)
    return target


def _adds_keys(archived: Path, records: list[dict[str, Any]]) -> bool:
    """True if `records` are the archived records, each with the same values, and some with more."""
    if not archived.is_file():
        return True
    text = gzip.decompress(archived.read_bytes()).decode()
    old = [json.loads(line) for line in text.splitlines() if line.strip()]
    if len(old) != len(records):
        return False
    for o, new in zip(old, records, strict=True):
        if o.keys() - new.keys() or _dump({k: new[k] for k in o}) != _dump(o):  # NaN-safe
            return False
    return any(len(new) > len(o) for o, new in zip(old, records, strict=True))


def _dump(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)


def restore_run(
    archive: Path,
    run_dir: Path,
    method: str,
    seed: int,
    protocol: dict[str, Any] | None = None,
    fingerprint: Fingerprint | None = None,
) -> bool:
    """Write an archived run back into `run_dir` if it is not finished there; True if restored.
    Raises `ArchiveMismatch` if the archived run's protocol differs from `protocol`, with
    `fingerprint()` as its `fingerprint` when the archived protocol has one (computed only then,
    for a run about to be restored)."""
    source = archived_dir(archive, method, seed)
    run_dir = Path(run_dir)
    if (run_dir / SUMMARY_FILE).is_file() or not (source / SUMMARY_FILE).is_file():
        return False
    if protocol is not None and (source / PROTOCOL_FILE).is_file():
        archived = json.loads((source / PROTOCOL_FILE).read_text())
        if fingerprint is not None and "fingerprint" in archived:
            protocol = {**protocol, "fingerprint": fingerprint()}
        differences = protocol_differences(archived, protocol)
        if differences:
            shown = "; ".join(differences[:5]) + ("; ..." if len(differences) > 5 else "")
            raise ArchiveMismatch(
                f"archived run {source} was made under another protocol ({shown}); move it "
                "aside (or restore the settings) so it is not counted as finished"
            )
    if run_dir.exists():  # an unfinished local attempt: the archived run replaces it
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    _atomic_write(run_dir / METRICS_FILE, gzip.decompress((source / ARCHIVED_METRICS).read_bytes()))
    _atomic_write(run_dir / SUMMARY_FILE, (source / SUMMARY_FILE).read_bytes())
    return True


def _atomic_write(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
