"""Preference learning with replay: annotated pairs as table rows, pair losses, pair replay.

- `annotators`: who judges a pair (the verifier, a reward model as judge), under a time limit,
  counted;
- `pairs`: pairs from a round's groups, with the reference log-probs taken once;
- `files`: a JSONL/Parquet file of given pairs;
- `replay`: the pair table and how pairs are drawn again (uniform, recency, margin);
- `step`: one optimizer step on pairs.

The pair losses (DPO, IPO, SLiC on the implicit reward margin) live with the other losses
(`algorithms.losses.pairs`), and the loop (`preference.enabled: true`) is a runtime
(`runtime.preference`): this package holds what pairs are, below the config and the runtimes.
"""

from llm_replay.algorithms.losses.pairs import PAIR_LOSSES, PairLoss, build_pair_loss

__all__ = ["PAIR_LOSSES", "PairLoss", "build_pair_loss"]
