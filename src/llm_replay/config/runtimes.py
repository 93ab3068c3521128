"""The runtimes as objects that say what they refuse, so `Config.check` asks the chosen one
instead of holding the compatibility matrix as if-chains on `runtime` (issue #55).

Each runtime names the settings it cannot run, in the order a user should fix them; the first
refusal is the run's error, naming its field. The trainers themselves live in `runtime/` (above
the config); these are the config's view of them: what each can and cannot take.

- `sync`: everything, except the sharded and durable tables that only Ray's table actors serve;
- `threaded`: no learned reward model, no preference loop, no dynamic sampling or prompt
  skipping, no head gate, no `replay.init_from` into a table the workers fill, a method that runs
  asynchronously, and a limiter band that cannot deadlock; and no sharded tables;
- `ray`: as threaded, and sharded or durable tables only for a method whose table the workers
  fill at the replay ratio, with a capacity to split.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from llm_replay.methods.pipeline import workers_fill_table

if TYPE_CHECKING:
    from llm_replay.config import Config


class Runtime:
    """A runtime's refusals (`refusals(config)`, each a one-line error naming its field), and
    the trainer that runs it (`trainer(config)`, a `module:Class` path, imported only by
    `runtime.build_trainer`, since the config sits below the trainers)."""

    name: ClassVar[str]
    description: ClassVar[str]
    trainer_path: ClassVar[str]

    def trainer(self, config: Config) -> str:
        return self.trainer_path

    def refusals(self, config: Config) -> Iterator[str]:
        yield from self._shards(config)

    def refusal(self, config: Config) -> str | None:
        """The first thing this runtime refuses in `config`, or None."""
        return next(iter(self.refusals(config)), None)

    def _shards(self, config: Config) -> Iterator[str]:
        if config.workers.sharded:
            yield (
                f"{_sharding(config)}: sharded and durable tables run under runtime=ray (this "
                f"run is runtime={self.name})"
            )


class Sync(Runtime):
    name = "sync"
    description = "one process, deterministic"
    trainer_path = "llm_replay.runtime.sync:SyncTrainer"

    def trainer(self, config: Config) -> str:
        """The preference loop is the sync loop over annotated pairs (`runtime.preference`)."""
        if config.preference.enabled:
            return "llm_replay.runtime.preference:PreferenceTrainer"
        return self.trainer_path


class Threaded(Runtime):
    name = "threaded"
    description = "generation workers in threads beside the learner"
    trainer_path = "llm_replay.runtime.threaded:ThreadedTrainer"

    def refusals(self, config: Config) -> Iterator[str]:
        yield from self._shards(config)
        yield from self._asynchronous(config)

    def _asynchronous(self, config: Config) -> Iterator[str]:
        if config.task.reward == "model":
            yield (
                f"task.reward = 'model': runtime={self.name} does not carry a reward model (and "
                "its refreshes) to its workers yet; use runtime=sync"
            )
        if config.preference.enabled:
            yield (
                f"preference.enabled = true: runtime={self.name} does not train on pairs yet; "
                "use runtime=sync"
            )
        method = config.replay.method_class
        refusal = method.async_refusal(config.replay.settings)
        if refusal is not None:
            yield (
                f"replay.method = {config.replay.method!r}: runtime={self.name} cannot run "
                f"it: {refusal}"
            )
        for key, on in (
            ("dynamic_sampling", config.generation.dynamic_sampling),
            ("skip.enabled", config.generation.skip.enabled),
        ):
            if on:
                yield f"generation.{key} = true: not supported by runtime={self.name}"
        if config.algorithm.head_gate:
            yield (
                f"algorithm.head_gate = {config.algorithm.head_gate!r}: not supported by "
                f"runtime={self.name} (its checkpoints do not carry the gate yet)"
            )
        guard = config.replay.knob_reading("replay_cosine")
        if guard is not None:
            yield (
                f"replay.{guard} = true: not supported by runtime={self.name} (its workers "
                "generate ahead of the learner, so a step has no rows of the weights it trains "
                "and the guard would never read anything); use runtime=sync"
            )
        fills_table = workers_fill_table(method, bool(config.replay.enabled_options()))
        if config.replay.init_from is not None and fills_table:
            yield (
                f"replay.init_from: runtime={self.name} feeds method "
                f"{config.replay.method!r}'s table from the workers directly, which does not "
                "carry the source table's versions yet; start it in a sync run"
            )
        need = (
            config.replay.samples_per_insert * config.generation.rollouts_per_step
            + config.train.batch_size
        )
        buffer = config.workers.error_buffer
        ratio_limited = fills_table and not method.consumes_rollouts
        if buffer is not None and ratio_limited and 2 * buffer < need:
            yield (
                f"workers.error_buffer = {buffer:g}: the band (2 × error_buffer) must hold "
                f"replay_ratio × rollouts_per_step + batch_size = {need:g} rollouts, or a "
                "blocked worker and a blocked learner could deadlock"
            )


class Ray(Threaded):
    name = "ray"
    description = "Ray actors: generation workers, the learner and the table, on a cluster"
    trainer_path = "llm_replay.runtime.ray:RayTrainer"

    def refusals(self, config: Config) -> Iterator[str]:
        yield from self._sharded_method(config)
        yield from self._asynchronous(config)

    def _sharded_method(self, config: Config) -> Iterator[str]:
        if not config.workers.sharded:
            return
        method = config.replay.method_class
        fills_table = workers_fill_table(method, bool(config.replay.enabled_options()))
        if not fills_table or method.consumes_rollouts:
            what = "consumes each rollout once" if fills_table else "runs in rounds"
            yield (
                f"{_sharding(config)}: method {config.replay.method!r} {what} under "
                "runtime=ray; sharded and durable tables serve the methods whose table the "
                "workers fill at the replay ratio (uniform, positive)"
            )
        elif not hasattr(config.replay.settings, "capacity"):
            yield (
                f"{_sharding(config)}: method {config.replay.method!r} has no "
                "replay.capacity to split across shards"
            )


def _sharding(config: Config) -> str:
    """`workers.table_shards = N` (or `workers.table_fsync = ...`): the setting that shards."""
    w = config.workers
    name = "table_shards" if w.table_shards > 1 else "table_fsync"
    return f"workers.{name} = {getattr(w, name)!r}"


RUNTIMES: dict[str, Runtime] = {r.name: r for r in (Sync(), Threaded(), Ray())}
