"""Benchmark of the tool harness on the local shadow backend.

Prints:
  1. workspace creation time for a generated repository (default 5,000 files) with
     `LocalBackend.create`, against a plain `git worktree add` and `cp -r` of the same repository;
  2. per-tool latency: the median (and p90) wall time of many calls of each tool through
     `ToolRegistry.call`, as the agent loop makes them;
  3. with --agent: one short episode of the embedded model (SmolLM2-135M, grammar-constrained) on
     that workspace, split into policy time, tool time and the loop's own overhead, and the
     policy's time against raw `model.generate` for the same prompt and completion lengths.

Usage: python bench/harness.py [--files 5000] [--calls 30] [--creations 5] [--agent] [--agent-steps 4]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.tools import default_registry  # noqa: E402
from harness.workspace import CommandResult  # noqa: E402
from shadow_backend.local import LocalBackend, bwrap_works  # noqa: E402

MODULE = '''"""Generated module {i}."""

import os


class Widget{i}:
    def __init__(self, size):
        self.size = size

    def area(self):
        return self.size * self.size


def helper_{i}(values):
    total = 0
    for value in values:
        total += value * {i}
    return total


def needle_{i}():
    return "needle {i}"
'''


def generate_repo(root: Path, files: int) -> None:
    """A git repository of `files` Python modules in 100-file directories, committed once."""
    for i in range(files):
        path = root / module_path(i)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MODULE.format(i=i))
    (root / ".gitignore").write_text("*.log\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "generated"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True)


def timed(fn: Callable[[], Any], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def row(name: str, seconds: Sequence[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    return f"  {name:<34} median {statistics.median(ms):9.1f} ms   p90 {p90:9.1f} ms   (n={len(ms)})"


@dataclass
class NoRipgrep:
    """The workspace as a host without ripgrep sees it (grep's Python fallback)."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, command: Any, *, timeout_s: float) -> CommandResult:
        return CommandResult(127, "", "", False, 0.0)


def bench_creation(repo: Path, scratch: Path, runs: int) -> None:
    print(f"workspace creation ({runs} runs each)")

    def create() -> None:
        LocalBackend.create(repo, parent_dir=scratch).close()

    def worktree() -> None:
        target = scratch / "worktree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(target)], cwd=repo, check=True)
        subprocess.run(["git", "worktree", "remove", "--force", str(target)], cwd=repo, check=True)

    def copy() -> None:
        subprocess.run(["cp", "-r", str(repo), str(scratch / "copy")], check=True)
        shutil.rmtree(scratch / "copy")

    print(row("LocalBackend.create + close", timed(create, runs)))
    print(row("git worktree add + remove", timed(worktree, runs)))
    print(row("cp -r + rm", timed(copy, runs)))


def module_path(i: int) -> str:
    return f"pkg{i // 100:03d}/mod{i:05d}.py"


def bench_tools(repo: Path, scratch: Path, calls: int, files: int) -> None:
    registry = default_registry()
    target = module_path(files // 2)
    with LocalBackend.create(repo, parent_dir=scratch) as ws:
        print(f"per-tool latency on {len(ws.list_files())} files ({ws.origin.sandbox})")
        counter = iter(range(10**9))

        def call(name: str, args: dict[str, Any], workspace: Any = ws) -> Callable[[], None]:
            def go() -> None:
                result = registry.call(name, args, workspace)
                assert not result.is_error, result.output

            return go

        def edit() -> None:
            n = next(counter)
            result = registry.call("edit_file", {"path": target, "old_string": f"size * {n - 1}" if n else
                                                 "size * self.size", "new_string": f"size * {n}"}, ws)
            assert not result.is_error, result.output

        cases = [
            ("read_file", call("read_file", {"path": target})),
            ("read_file (lines 5-10)", call("read_file", {"path": target, "start_line": 5, "end_line": 10})),
            ("list_dir (depth 2)", call("list_dir", {"depth": 2})),
            ("glob **/mod04*.py", call("glob", {"pattern": "**/mod04*.py"})),
            ("grep (ripgrep)", call("grep", {"pattern": r"needle_1\d\d", "include": "*.py"})),
            ("grep (Python fallback)", call("grep", {"pattern": r"needle_1\d\d", "include": "*.py"}, NoRipgrep(ws))),
            ("outline", call("outline", {"path": target})),
            ("edit_file", edit),
            ("write_file", lambda: registry.call("write_file", {"path": "scratch/out.txt", "content": "x" * 1000}, ws)),
            ("run_command (true)", call("run_command", {"command": "true"})),
            ("run_command (ls | wc -l)", call("run_command", {"command": "ls -R | wc -l"})),
            ("workspace.diff() after edits", ws.diff),
            ("workspace.list_files()", ws.list_files),
        ]
        for name, fn in cases:
            fn()  # warm caches (tree-sitter grammar, git index stat data)
            print(row(name, timed(fn, calls)))


def bench_agent(repo: Path, scratch: Path, steps: int, files: int) -> None:
    import torch

    from harness.agent import Agent
    from harness.config import RecapConfig
    from harness.policies import load_policy

    start = time.perf_counter()
    policy = load_policy("embedded", seed=0)
    print(f"agent loop with the embedded model (loaded in {time.perf_counter() - start:.1f} s), {steps} steps")
    with LocalBackend.create(repo, parent_dir=scratch) as ws:
        agent = Agent(policy=policy, workspace=ws, config=RecapConfig().with_overrides(max_steps=steps))
        start = time.perf_counter()
        agent.run(f"Find where helper_{files // 2} is defined and say what it returns.")
        total = time.perf_counter() - start
    turns = [e for e in agent.events if e.type == "policy_turn"]
    tools = sum(e.duration_s for e in agent.events if e.type == "observation")
    policy_s = sum(t.duration_s for t in turns)
    raw = 0.0
    for turn in turns:
        if turn.prompt_ids and turn.completion_ids:
            n = len(turn.completion_ids)
            ids = torch.tensor([turn.prompt_ids], device=policy.device)
            begin = time.perf_counter()
            with torch.no_grad():
                policy.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                      min_new_tokens=n, do_sample=False, pad_token_id=policy.tokenizer.eos_token_id)
            raw += time.perf_counter() - begin
    tokens = sum(t.completion_tokens for t in turns)
    print(f"  episode wall time                  {total:9.2f} s  ({len(turns)} policy turns, {tokens} completion tokens)")
    print(f"  policy.generate (sum)              {policy_s:9.2f} s")
    print(f"  raw model.generate, same lengths   {raw:9.2f} s  (policy overhead {policy_s - raw:+.2f} s: template, grammar, sampling loop)")
    print(f"  tools (sum)                        {tools:9.2f} s")
    print(f"  agent loop overhead                {total - policy_s - tools:9.2f} s  "
          f"({(total - policy_s - tools) / max(len(turns), 1) * 1000:.0f} ms per turn: context, token counts, log)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5000, help="files in the generated repository")
    parser.add_argument("--calls", type=int, default=30, help="calls per tool")
    parser.add_argument("--creations", type=int, default=5, help="runs of each creation method")
    parser.add_argument("--agent", action="store_true", help="also time an episode of the embedded model")
    parser.add_argument("--agent-steps", type=int, default=4, help="step limit of that episode")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, bubblewrap {'works' if bwrap_works() else 'unavailable'}")
    with tempfile.TemporaryDirectory(prefix="recap-bench-") as tmp:
        repo, scratch = Path(tmp) / "repo", Path(tmp) / "scratch"
        scratch.mkdir()
        start = time.perf_counter()
        generate_repo(repo, args.files)
        print(f"generated {args.files} files in {time.perf_counter() - start:.1f} s\n")
        bench_creation(repo, scratch, args.creations)
        print()
        bench_tools(repo, scratch, args.calls, args.files)
        if args.agent:
            print()
            bench_agent(repo, scratch, args.agent_steps, args.files)


if __name__ == "__main__":
    main()
