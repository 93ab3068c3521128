"""One process of the two-process TRL replay test (launched by `accelerate launch`).

Runs uniform replay through `ReplayGRPOTrainer` on the shipped tiny model and writes, per process,
a digest of every micro-batch drawn (before the process takes its slice) and of the table's
contents at the end, so the test can check the processes agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
from datasets import Dataset

from llm_replay.integrations.trl import ReplayGRPOConfig, ReplayGRPOTrainer
from llm_replay.models import load_policy


def digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for key in sorted(arrays):
        h.update(key.encode())
        h.update(np.ascontiguousarray(arrays[key]).tobytes())
    return h.hexdigest()


def reward(completions: list[str], answer: list[str], **_: object) -> list[float]:
    return [
        1.0 if c.strip().startswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--resume", action="store_true")
    options = parser.parse_args()
    prompts = [f"{a}+{b}=" for a in range(10) for b in range(10)]
    dataset = Dataset.from_dict({"prompt": prompts, "answer": [str(eval(p[:-1])) for p in prompts]})
    model, tokenizer = load_policy("builtin:tiny-chain-sum", device="cpu", dtype="float32")
    args = ReplayGRPOConfig(
        output_dir=options.out,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=options.steps,
        learning_rate=1e-4,
        bf16=False,
        activation_checkpointing=False,
        lr_scheduler_type="constant",
        optim="adamw_torch",
        loss_type="dapo",
        beta=0.0,
        temperature=0.9,
        seed=0,
        report_to=[],
        save_strategy="steps",
        save_steps=2,
        use_cpu=True,
        replay_method="uniform",
        replay_knobs={"capacity": 32, "replay_ratio": 2},
    )
    trainer = ReplayGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    draws: list[str] = []
    micro_batch = trainer._micro_batch

    def spy(sample):  # type: ignore[no-untyped-def]
        draws.append(
            digest({"keys": sample.keys, "ids": sample.input_ids, "adv": sample.advantages})
        )
        return micro_batch(sample)

    trainer._micro_batch = spy
    trainer.train(resume_from_checkpoint=True if options.resume else None)
    _meta, arrays = trainer.pipeline.method.table.state()
    rank = trainer.accelerator.process_index
    report = {
        "rank": rank,
        "processes": trainer.accelerator.num_processes,
        "draws": draws,
        "table": digest(arrays),
        "table_size": trainer.pipeline.method.table.size,
        "global_step": trainer.state.global_step,
        "rounds": trainer.rounds,
    }
    tag = "resumed" if options.resume else "first"
    (Path(options.out) / f"report-{tag}-{rank}.json").write_text(json.dumps(report))
    # Left to interpreter exit, the process group's C++ threads are torn down in no set order, and
    # a worker that has written its report can still abort ("terminate called without an active
    # exception"): close it while both processes are here.
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.state.destroy_process_group()


if __name__ == "__main__":
    main()
