"""Generation: the Generator protocol and the Hugging Face transformers backend."""

from llm_replay.generation.base import Generation, Generator, SamplingParams
from llm_replay.generation.hf import HFGenerator

__all__ = ["Generation", "Generator", "HFGenerator", "SamplingParams"]
