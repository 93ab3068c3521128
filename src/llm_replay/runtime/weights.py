"""Weight publishing: how generators get the learner's weights, one module for every runtime.

- Sync loop: generator and learner are one model object, so publishing is recording the version.
- Threaded runtime (`InProcessWeights`): each worker holds its own copy on its own device.
  Publishing records a version and copies nothing; a worker that pulls copies the learner's
  tensors straight into its model under the learner's update lock, so it never sees half an
  optimizer step, and no third copy of the state is ever made (at 7B a published clone would
  double the learner's memory). The pulled weights are labelled with the learner's version at the
  moment of the copy, so a rollout's policy version is exact even with `publish_every` > 1.
- Ray runtime (`ObjectStoreWeights`): crossing processes needs one CPU copy per publish, put in
  the object store and fetched by reference by the workers that need it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch


class InProcessWeights:
    def __init__(self, model: Any, update_lock: threading.Lock, version: Callable[[], int]) -> None:
        self._model = model
        self._lock = update_lock
        self._learner_version = version
        self._version = -1

    @property
    def version(self) -> int:
        return self._version

    def publish(self, version: int) -> None:
        if version < self._version:
            raise ValueError(f"version = {version}: published versions only move forward")
        self._version = int(version)

    def pull(self, target: Any, held_version: int) -> int | None:
        """Copy the learner's weights into `target` if a newer version was published; returns
        the version copied, or None."""
        if self._version <= held_version:
            return None
        with self._lock, torch.no_grad():
            source = self._model.state_dict()
            for name, tensor in target.state_dict().items():
                tensor.copy_(source[name], non_blocking=False)
            return int(self._learner_version())


class ObjectStoreWeights:
    """The learner actor's side under Ray: (version, [object ref]) of the newest published copy."""

    def __init__(self) -> None:
        self.latest: tuple[int, list[Any]] = (-1, [None])

    def publish(self, model: Any, version: int) -> None:
        import ray

        state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
        self.latest = (int(version), [ray.put(state)])
