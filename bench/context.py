"""Context management cost: prompt tokens encoded and wall time for ONE scripted long episode,
per strategy (none / drop-oldest / mask / self-summary), each with and without KV-cache reuse.

The episode is fixed: the agent reads `--turns` files of `--lines` lines each, then finishes;
every summary turn answers with the same short summary. Prompts are encoded by a real
`TransformersPolicy` (`--model tiny` or `embedded`) that samples one token per turn (decoding
is left out of the cost), so the numbers compare only what context management changes: how
much of each prompt must run through the model. With strategy "none" the episode stops when the
prompt no longer fits (context_exhausted).

    python -m bench.context --model tiny --turns 60 --window 8192   (from the repository root:
    `python bench/context.py` would import bench/harness.py as `harness`)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from harness.agent import Agent
from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.session import PolicyTurn, Summary
from harness.toolcall import parse_tool_calls, render_tool_call
from harness.types import Completion, Message, TurnKind

SUMMARY = (
    "Goal: read every data file in order and report. Files: data/f*.txt read so far, none changed. "
    "Tried: nothing failed. Next step: read the next data file."
)


class ReplayedPolicy:
    """Encodes each prompt with `inner` (one sampled token) and answers with the scripted turn."""

    def __init__(self, inner: Any, actions: Sequence[str]) -> None:
        self.inner, self.actions = inner, list(actions)
        self.spec, self.context_window = inner.spec, inner.context_window
        self.turn = 0

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        return self.inner.count_tokens(messages, tools)

    def generate(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None, *, max_new_tokens: int, kind: TurnKind = "action") -> Completion:
        encoded = self.inner.generate(messages, tools, max_new_tokens=1, kind=kind)
        text = SUMMARY if kind == "summary" else self.actions[min(self.turn, len(self.actions) - 1)]
        self.turn += kind == "action"
        _, calls, errors = parse_tool_calls(text, turn=self.turn) if kind == "action" else ("", [], [])
        return Completion(text=text, tool_calls=tuple(calls), parse_errors=tuple(errors), prompt_tokens=encoded.prompt_tokens,
                          completion_tokens=len(self.inner.tokenizer.encode(text)), encoded_tokens=encoded.encoded_tokens,
                          duration_s=encoded.duration_s)


def make_repo(root: Path, *, files: int, lines: int) -> Path:
    import subprocess

    for i in range(files):
        path = root / "data" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"record {i}.{j}: value={i * j % 97} status=ok\n" for j in range(lines)))
    env = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", *env, "commit", "-qm", "data"], cwd=root, check=True)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", choices=["tiny", "embedded"])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--lines", type=int, default=12)
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--summarize-at", type=float, default=0.7, help="fraction of the window or tokens")
    parser.add_argument("--strategies", default="none,drop_oldest,mask,summary")
    args = parser.parse_args()

    from harness.policies import loading
    from harness.policies.transformers_policy import TransformersPolicy, TransformersPolicyConfig
    from shadow_backend.local import LocalBackend

    model, tokenizer = loading.build_tiny(max_position_embeddings=max(4096, args.window)) if args.model == "tiny" else loading.load_embedded()
    actions = [render_tool_call("read_file", {"path": f"data/f{i}.txt"}) for i in range(args.turns)]
    actions.append(render_tool_call("finish", {"message": "read every file"}))
    config = RecapConfig(
        agent=AgentConfig(max_steps=args.turns + 1, max_new_tokens=64, summary_max_new_tokens=64, loop_guard_repeats=5),
        context=ContextConfig(summarize_at=args.summarize_at, hard_limit=max(0.95, args.summarize_at), keep_recent=2, max_summaries=1000),
    )
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "repo", files=args.turns, lines=args.lines)
        print(f"model={args.model} window={args.window} summarize_at={args.summarize_at} turns={args.turns} "
              f"(read_file of {args.lines} lines each; default tools, whose specs take ~1.5k tokens)")
        print(f"{'strategy':<12} {'kv':<4} {'steps':>5} {'stop':<18} {'summ':>4} {'prompt tok':>10} {'encoded tok':>11} {'wall s':>7}")
        for strategy in args.strategies.split(","):
            for reuse in (False, True):
                inner = TransformersPolicy(model=model, tokenizer=tokenizer, spec=args.model, config=TransformersPolicyConfig(
                    temperature=0.0, constrain=False, reuse_kv_cache=reuse, max_context_tokens=args.window))
                policy = ReplayedPolicy(inner, actions)
                cfg = config.with_overrides(strategy=strategy)
                with LocalBackend.create(repo) as workspace:
                    started = time.perf_counter()
                    result = Agent(policy=policy, workspace=workspace, tools=None, config=cfg).run("Read every data file in order.")
                    wall = time.perf_counter() - started
                turns = [e for e in result.events if isinstance(e, PolicyTurn)]
                summaries = sum(isinstance(e, Summary) for e in result.events)
                print(f"{strategy:<12} {'on' if reuse else 'off':<4} {result.steps:>5} {result.stop_reason:<18} {summaries:>4} "
                      f"{sum(t.prompt_tokens for t in turns):>10} {sum(t.encoded_tokens for t in turns):>11} {wall:>7.1f}")


if __name__ == "__main__":
    main()
