"""Method options: what any method they apply to can turn on (`replay.<option>.enabled: true`),
one module each, registered by existing as the methods are: zero_variance, anneal (the replay
controller), balance (FADE), retire, stale_rewards (rewards an older reward model gave) and
bandit (replay that measures whether it pays)."""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
