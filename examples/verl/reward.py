"""verl's reward function for the chain_sum data `prepare.py` writes: exact match of the answer.

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info)` per trajectory
(`reward.custom_reward_function`); the built-in model answers with the number and stops, so the
completion up to its first whitespace is compared with the ground truth.
"""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **kwargs: Any
) -> float:
    answer = solution_str.strip().split()
    return 1.0 if answer and answer[0] == str(ground_truth).strip() else 0.0
