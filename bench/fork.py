"""Fork cost of shadow workspaces, local and Docker, at 100 and 5,000 files.

    .venv/bin/python bench/fork.py [--files 100 5000] [--repeats 5] [--no-docker]

For each size it generates a git repository of small Python files, makes a workspace, and prints
the median wall time (ms) of:

    copytree      shutil.copytree of the workspace directory (copying every file in Python)
    cp -a         `cp -a` of the workspace directory (copying every file in C)
    copy_tree     shadow_backend.fork.copy_tree (reflink, else hard-linked git objects + cp -a)
    local fork    LocalWorkspace.fork(1) (copy_tree + the private index + bookkeeping)
    docker fork   DockerWorkspace.fork(1) (local fork + hand-over + a new container)
    docker create DockerBackend.create of the repository, for scale

and the strategy `copy_tree` picked on this file system. Needs dockerd and the recap-base image
unless --no-docker.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shadow_backend.fork import copy_tree, strategy_for  # noqa: E402
from shadow_backend.local import LocalBackend  # noqa: E402


def make_repo(root: Path, files: int) -> Path:
    for i in range(files):
        path = root / f"pkg{i % 50}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"def f{i}_{j}(x):\n    return x + {j}\n\n" for j in range(20)))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "bench"], cwd=root, check=True)
    return root


def median_ms(fn: Callable[[], Callable[[], None]], repeats: int) -> float:
    """`fn` does the work and returns its clean-up (not timed)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        cleanup = fn()
        times.append((time.perf_counter() - started) * 1000)
        cleanup()
    return statistics.median(times)


def bench_size(files: int, *, repeats: int, docker: bool) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="recap-bench-fork-") as tmp:
        repo = make_repo(Path(tmp) / "repo", files)
        workspace = LocalBackend.create(repo)
        src = Path(workspace.root)
        scratch = Path(tmp) / "copies"
        scratch.mkdir()

        def copy_with(copier: Callable[[Path, Path], object]) -> Callable[[], None]:
            dest = scratch / f"c{time.perf_counter_ns()}"
            copier(src, dest)
            return lambda: shutil.rmtree(dest)

        results["copytree"] = median_ms(lambda: copy_with(lambda s, d: shutil.copytree(s, d, symlinks=True)), repeats)
        results["cp -a"] = median_ms(
            lambda: copy_with(lambda s, d: subprocess.run(["cp", "-a", str(s), str(d)], check=True)), repeats)
        results["copy_tree"] = median_ms(lambda: copy_with(copy_tree), repeats)

        def local_fork() -> Callable[[], None]:
            (copy,) = workspace.fork(1)
            return copy.close

        results["local fork"] = median_ms(local_fork, repeats)
        results["strategy"] = strategy_for(src)  # type: ignore[assignment]
        workspace.close()
        if docker:
            from shadow_backend.docker_backend import DockerBackend

            holder: list[object] = []

            def create() -> Callable[[], None]:
                ws = DockerBackend.create(repo)
                holder.append(ws)
                return lambda: None

            results["docker create"] = median_ms(create, 1)
            dws = holder[0]

            def docker_fork() -> Callable[[], None]:
                (copy,) = dws.fork(1)  # type: ignore[attr-defined]
                return copy.close

            results["docker fork"] = median_ms(docker_fork, repeats)
            dws.close()  # type: ignore[attr-defined]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="+", default=[100, 5000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-docker", action="store_true")
    args = parser.parse_args()
    keys = ["copytree", "cp -a", "copy_tree", "local fork", "docker fork", "docker create"]
    print(f"{'files':>6} " + " ".join(f"{k:>13}" for k in keys) + "  strategy   (median ms)")
    for files in args.files:
        r = bench_size(files, repeats=args.repeats, docker=not args.no_docker)
        cells = " ".join(f"{r[k]:13.1f}" if k in r else f"{'-':>13}" for k in keys)
        print(f"{files:>6} {cells}  {r['strategy']}")


if __name__ == "__main__":
    main()
