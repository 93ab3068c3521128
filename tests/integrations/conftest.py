"""The verl tests run in verl's own environment (`make verl-test`, .venv-verl); the main one has no verl."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("verl") else ["verl_v1"]
