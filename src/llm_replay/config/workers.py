"""`workers:` — the asynchronous runtimes' section: generation workers, the limiter's band, Ray
placement, and the table's shards and durability under Ray (`runtime/shards.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from llm_replay.buffer.durable import FSYNC_POLICIES
from llm_replay.checks import integer
from llm_replay.config.parse import ConfigError, check_positive, did_you_mean, setting


@dataclass
class WorkersConfig:
    """Asynchronous runtimes (`threaded`, `ray`): generation workers, limiter band, placement."""

    count: int = setting(2, "generation workers")
    error_buffer: float | None = setting(
        None, "how far inserts may run ahead of samples (the rate limiter's band); None: derived"
    )
    publish_every: int = setting(1, "learner steps between weight publications to the workers")
    device: str | None = setting(None, "the workers' device; None: model.device")
    cpus_per_worker: float = setting(0.5, "Ray: CPUs reserved per generation worker")
    gpus_per_worker: float = setting(0.0, "Ray: GPUs reserved per generation worker")
    learner_cpus: float = setting(1.0, "Ray: CPUs reserved for the learner")
    learner_gpus: float = setting(0.0, "Ray: GPUs reserved for the learner")
    ray_address: str | None = setting(None, "Ray: a cluster to join; None: a local Ray")
    max_restarts: int = setting(3, "Ray: restarts of a worker that dies")
    table_shards: int = setting(1, "Ray: the table split over this many shard actors")
    table_fsync: str | None = setting(
        None, "Ray: durable tables (always | every | never fsync); None: in memory"
    )

    def check(self) -> None:
        check_positive("count", self.count)
        if self.error_buffer is not None:
            check_positive("error_buffer", self.error_buffer)
        check_positive("publish_every", self.publish_every)
        if self.device is not None and not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device = {self.device!r}: use 'cpu', 'cuda' or 'cuda:N'")
        for name in ("cpus_per_worker", "gpus_per_worker", "learner_cpus", "learner_gpus"):
            check_positive(name, getattr(self, name), zero_ok=True)
        check_positive("max_restarts", self.max_restarts, zero_ok=True)
        integer("table_shards", self.table_shards, minimum=1, error=ConfigError)
        check_positive("table_shards", self.table_shards)
        if self.table_fsync is not None and self.table_fsync not in FSYNC_POLICIES:
            raise ConfigError(
                f"table_fsync = {self.table_fsync!r}: choose one of {FSYNC_POLICIES} or null"
                + did_you_mean(self.table_fsync, FSYNC_POLICIES)
            )

    @property
    def sharded(self) -> bool:
        """Whether the Ray runtime runs its table as shards behind a front (`runtime.shards`)."""
        return self.table_shards > 1 or self.table_fsync is not None
