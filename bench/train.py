"""Throughput of RL training on the embedded model: rollout (sampling) and learning tokens/s, peak memory.

    .venv/bin/python bench/train.py [--model embedded] [--turns 4] [--max-new-tokens 64]

Rollout: constrained action turns sampled by the policy on the agent's real prompt (system prompt,
task, every tool spec), counting sampled tokens per second (prompt encoding included, as in a
rollout). Prefill: a forward-only pass (no gradient) over the same sequences, the anchor for
learning speed. Learning: `rl.train.learn` (forward with grammar re-scoring, backward, AdamW step)
over those turns with the run's defaults (one turn per micro-batch, activation checkpointing),
counting trained (completion) tokens and all tokens run through the model per second, and the
ratio to prefill (goal: at least 1/3).
Peak memory: the process's max RSS on CPU; `torch.cuda.max_memory_allocated` on CUDA, where the
learning pass is repeated with a larger batch (the turns replicated 8x, 16 per micro-batch).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

# run as a script, bench/ comes first on sys.path and bench/harness.py would shadow the package
sys.path[0] = str(Path(__file__).resolve().parents[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--turns", type=int, default=4, help="action turns to sample")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=1, help="turns per forward/backward")
    parser.add_argument("--no-activation-checkpointing", action="store_true")
    args = parser.parse_args()

    import torch

    from harness.prompts import SYSTEM_PROMPT
    from harness.tools import default_registry
    from rl.train import TrainConfig, learn, load_trainable_policy, make_optimizer
    from rl.trajectory import TurnSample

    cfg = TrainConfig(sessions_dir=tempfile.gettempdir(), model=args.model, micro_batch_turns=args.micro_batch,
                      max_new_tokens=args.max_new_tokens, constrain=True,
                      activation_checkpointing=not args.no_activation_checkpointing)
    t0 = time.perf_counter()
    policy = load_trainable_policy(cfg)
    device = next(policy.model.parameters()).device
    print(f"model {args.model} on {device}: loaded with LoRA r={cfg.lora_rank} in {time.perf_counter() - t0:.1f} s")
    specs = default_registry().specs()
    by_name = {s["function"]["name"]: s for s in specs}

    turns, sampled, prompt_tokens = [], 0, 0
    t0 = time.perf_counter()
    for i in range(args.turns):
        policy.reseed(i)
        policy.reset_cache()
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"Tests fail in module_{i}.py: fix the off-by-one bug."}]
        out = policy.generate(messages, specs, max_new_tokens=args.max_new_tokens, kind="action")
        sampled += len(out.completion_ids)
        prompt_tokens += len(out.prompt_ids)
        turns.append(TurnSample(prompt_ids=out.prompt_ids, completion_ids=out.completion_ids, old_logprobs=out.logprobs,
                                kind="action", segment=0, turn=0, constrained=out.constrained,
                                offered_tools=tuple(by_name) if out.constrained else ()))
    rollout_s = time.perf_counter() - t0
    print(f"rollout: {sampled} tokens sampled in {rollout_s:.1f} s = {sampled / rollout_s:.1f} tok/s "
          f"(prompts {prompt_tokens / args.turns:.0f} tokens each, encoded once per turn)")

    def prefill() -> float:
        t = time.perf_counter()
        total = 0
        with torch.no_grad():
            for x in turns:
                ids = torch.tensor([list(x.prompt_ids) + list(x.completion_ids)], device=device)
                policy.model(input_ids=ids, logits_to_keep=1)
                total += ids.shape[1]
        rate = total / (time.perf_counter() - t)
        print(f"prefill (forward only, no gradient): {total} tokens at {rate:.0f} tok/s")
        return rate

    prefill_rate = prefill()

    def learning(batch_turns: list, micro: int) -> None:
        import dataclasses

        run_cfg = dataclasses.replace(cfg, micro_batch_turns=micro)
        optimizer, scheduler = make_optimizer(policy.model, run_cfg)
        advantages = [1.0 if k % 2 else -1.0 for k in range(len(batch_turns))]
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        learn(policy, optimizer, scheduler, batch_turns, advantages, [by_name] * len(batch_turns), run_cfg)
        if device.type == "cuda":
            torch.cuda.synchronize()
        s = time.perf_counter() - t
        trained = sum(len(x.completion_ids) for x in batch_turns)
        total = sum(len(x.completion_ids) + len(x.prompt_ids) for x in batch_turns)
        print(f"learn ({len(batch_turns)} turns, {micro} per micro-batch, activation checkpointing "
              f"{'on' if run_cfg.activation_checkpointing else 'off'}): {trained} trained tokens "
              f"({total} through the model) in {s:.1f} s = {trained / s:.1f} trained tok/s, {total / s:.0f} tok/s "
              f"= {total / s / prefill_rate:.2f} x prefill")
        if device.type == "cuda":
            print(f"  peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")

    learning(turns, args.micro_batch)
    if device.type == "cuda":
        learning(turns * 8, 16)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
