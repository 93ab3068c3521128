"""Hugging Face transformers backend: batched sampling with a KV cache, on CPU or CUDA.

Prompts are left-padded so every row's next token sits in the last column; position ids come from
the attention mask. Sampling is our own loop over `model(...)` (not `generate`) so the log-prob
of each sampled token is read from the very distribution it was drawn from
(`distribution.sampling_logprobs`, which the learner calls too), and the RNG is an explicit
`torch.Generator` on the model's device (seeded, saved in checkpoints). A row that emits EOS stops: later
positions are padding, not part of its completion. The batch runs until its longest completion
ends, as batched generation does, and `padded_tokens` counts what that costs; `steps` counts its
forward passes (one per position generated: the prefill samples the first).

The KV cache is passed under the name the model's `forward` takes: `cache` from transformers 5.24
on, `past_key_values` before (verl's environment pins 5.10), so neither warns nor breaks.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from llm_replay.generation.base import Generation, SamplingParams
from llm_replay.generation.distribution import entropy, sampling_logprobs


def cache_keyword(model: Any) -> str:
    """The name under which `model.forward` takes and returns its KV cache."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class HFGenerator:
    """Generates with a transformers causal LM it owns (a copy of the learner's weights)."""

    def __init__(self, model: Any, *, eos_token_id: int, pad_token_id: int, seed: int = 0) -> None:
        self.model = model
        self.eos_token_id = int(eos_token_id)
        self.pad_token_id = int(pad_token_id)
        self.policy_version = 0
        self.device = next(model.parameters()).device
        self.rng = self.seeded_rng(seed)
        self.cache_keyword = cache_keyword(model)

    def seeded_rng(self, seed: int) -> torch.Generator:
        """A generator on the model's device, so sampling never copies the distribution to CPU."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def load_weights(self, state: dict[str, Any], version: int) -> None:
        self.model.load_state_dict(state)
        self.policy_version = int(version)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        params: SamplingParams,
        *,
        rng: torch.Generator | None = None,
    ) -> Generation:
        """n completions per prompt; `rng` (default: the generator's own) drives sampling."""
        if n < 1:
            raise ValueError(f"n = {n!r}: must be >= 1")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompts: need at least one prompt, each with at least one token")
        generator = self.rng if rng is None else rng
        if not params.greedy and generator.device != self.device:
            raise ValueError(f"rng: on {generator.device}, the model on {self.device}")
        was_training = self.model.training
        self.model.eval()
        rows = [list(p) for p in prompts for _ in range(n)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache, logits = getattr(out, self.cache_keyword), out.logits[:, -1, :]
        next_position = positions[:, -1] + 1

        n_rows, steps = len(rows), params.max_new_tokens
        tokens = torch.full((n_rows, steps), self.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros((n_rows, steps), dtype=torch.float32)
        entropies = torch.zeros((n_rows, steps), dtype=torch.float32)
        lengths = torch.zeros(n_rows, dtype=torch.long)
        done = torch.zeros(n_rows, dtype=torch.bool)
        generated = 0
        for t in range(steps):
            logp = sampling_logprobs(logits, params.temperature, params.top_k, params.top_p)
            if params.greedy:
                token = logp.argmax(-1)
            else:
                token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
            live = ~done
            tokens[live, t] = token[live].cpu()
            logprobs[live, t] = logp.gather(-1, token[:, None]).squeeze(-1)[live].float().cpu()
            entropies[live, t] = entropy(logp)[live].float().cpu()
            lengths += live.cpu().long()
            generated = t + 1
            done |= (token == self.eos_token_id).cpu()
            if bool(done.all()) or t + 1 == steps:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            out = self.model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=next_position[:, None],
                use_cache=True,
                **{self.cache_keyword: cache},
            )
            cache, logits = getattr(out, self.cache_keyword), out.logits[:, -1, :]
            next_position = next_position + 1
        if was_training:
            self.model.train()
        keep = torch.arange(steps)[None, :] < lengths[:, None]
        finish = tuple("stop" if d else "length" for d in done.tolist())
        return Generation(
            prompt_index=np.repeat(np.arange(len(prompts), dtype=np.int64), n),
            completion_ids=tokens[keep].numpy().astype(np.int32),
            completion_lengths=lengths.numpy().astype(np.int32),
            behaviour_logprobs=logprobs[keep].numpy(),
            entropies=entropies[keep].numpy(),
            finish_reasons=finish,
            policy_version=self.policy_version,
            prompt_tokens=int(sum(len(r) for r in rows)),
            padded_tokens=int(n_rows * (width + generated)),
            steps=generated,  # the prefill, then a forward per position but the last
        )
