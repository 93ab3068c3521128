"""One way to check a setting's value, so every front end and config names a bad field alike.

A setting that must be an integer, a finite number or a flag was checked by hand in each place
that read one, with messages that drifted ("must be an integer >= 1", "expected a number",
"must be a number"). These helpers raise the caller's own error class (`ConfigError`,
`MethodConfigError`, plain `ValueError`) with the field's name and value first.
"""

from __future__ import annotations

import math
from typing import Any


def integer(
    name: str, value: Any, *, minimum: int | None = None, error: type[ValueError] = ValueError
) -> int:
    """`value` as an int (a bool is not one), at least `minimum` where given."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
    ):
        bound = "" if minimum is None else f" >= {minimum}"
        raise error(f"{name} = {value!r}: must be an integer{bound}")
    return value


def number(
    name: str,
    value: Any,
    *,
    positive: bool = False,
    error: type[ValueError] = ValueError,
) -> float:
    """`value` as a finite float (a bool is not one), > 0 with `positive`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{name} = {value!r}: must be a number")
    if not math.isfinite(value):
        raise error(f"{name} = {value!r}: must be finite")
    if positive and value <= 0:
        raise error(f"{name} = {value!r}: must be > 0")
    return float(value)


def positive(
    name: str, value: float, *, zero_ok: bool = False, error: type[ValueError] = ValueError
) -> float:
    """`value` finite and > 0 (>= 0 with `zero_ok`), for a value already known to be a number."""
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise error(f"{name} = {value!r}: must be finite and {bound}")
    return value


def boolean(name: str, value: Any, *, error: type[ValueError] = ValueError) -> bool:
    if not isinstance(value, bool):
        raise error(f"{name} = {value!r}: must be true or false")
    return value
