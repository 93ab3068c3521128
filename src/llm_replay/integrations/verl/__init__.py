"""llm-replay inside verl (v1 trainer): a custom sampler, an advantage estimator, losses.

Install into verl's own environment (`make verl-env` builds `.venv-verl`), then in verl's config:

    trainer.v1.sampler.custom_sampler.path=pkg://llm_replay.integrations.verl
    trainer.v1.sampler.custom_sampler.name=ReplaySampler
    +trainer.v1.sampler.sampler_kwargs.method=positive
    trainer.checkpoint_callback_class=llm_replay.integrations.verl.ReplayCheckpointCallback
    algorithm.adv_estimator=llm_replay
    algorithm.rollout_correction.bypass_mode=true
    actor_rollout_ref.rollout.calculate_log_probs=true

`sampler.py` says how a step's batch is composed, `plugin.py` what verl loads in its workers.
"""

from llm_replay.integrations.verl.advantages import BOOK, ESTIMATOR, AdvantageBook
from llm_replay.integrations.verl.checkpoint import ReplayCheckpointCallback
from llm_replay.integrations.verl.sampler import ReplaySampler
from llm_replay.integrations.verl.settings import SamplerSettings

__all__ = [
    "BOOK",
    "ESTIMATOR",
    "AdvantageBook",
    "ReplayCheckpointCallback",
    "ReplaySampler",
    "SamplerSettings",
]
