"""A local Ray and a real TransferQueue for the verl sampler tests, started once for the suite
(a Ray start is about twelve seconds on a two-core machine; each test clears the queue it uses)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def transfer_queue() -> Iterator[None]:
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    temp = ROOT / "tmp" / f"ray-verl-{os.getpid()}"  # two suites at once must not share a session
    temp.mkdir(parents=True, exist_ok=True)
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(temp), log_to_driver=False)
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        yield
    finally:
        try:
            tq.close()
        finally:
            ray.shutdown()
