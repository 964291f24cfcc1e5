"""Fork cost of shadow workspaces, local and Docker, at 100 and 5,000 files (best-of-N ms).

    .venv/bin/python bench/fork.py [--files 100 5000] [--file-kb 1] [--repeats 5] [--no-docker]

For each size it generates a git repository of small Python files, makes a workspace, and prints
the wall time (ms) of:

    copytree      shutil.copytree of the workspace directory (copying every file in Python)
    cp -a         `cp -a` of the workspace directory (copying every file in C)
    copy_tree     shadow_backend.fork.copy_tree (reflink, else hard-linked git objects + cp -a)
    local fork    LocalWorkspace.fork(1) (copy_tree of the root and of recap's git directory)
    docker fork   DockerWorkspace.fork(1) (local fork + hand-over + a new container)
    docker create DockerBackend.create of the repository, for scale

and the strategy `copy_tree` picked on this file system, with how many of the copied files were
hard-linked instead of copied. Times are the best of `--repeats` runs (the least disturbed by
other load on the machine). Needs dockerd and the recap-base image unless --no-docker.
"""

from __future__ import annotations

import argparse
import os
import shutil
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


def make_repo(root: Path, files: int, *, file_kb: int) -> Path:
    for i in range(files):
        path = root / f"pkg{i % 50}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        functions = max(1, file_kb * 1024 // 36)
        path.write_text("".join(f"def f{i}_{j}(x):\n    return x + {j}\n\n" for j in range(functions)))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "bench"], cwd=root, check=True)
    return root


def best_ms(fn: Callable[[], Callable[[], None]], repeats: int) -> float:
    """Best of `repeats` runs; `fn` does the work and returns its clean-up (not timed)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        cleanup = fn()
        times.append((time.perf_counter() - started) * 1000)
        cleanup()
        os.sync()  # flush this run's writes so that the next one is not timed paying for them
    return min(times)


def bench_size(files: int, *, file_kb: int, repeats: int, docker: bool) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="recap-bench-fork-") as tmp:
        repo = make_repo(Path(tmp) / "repo", files, file_kb=file_kb)
        workspace = LocalBackend.create(repo)
        src = Path(workspace.root)
        scratch = Path(tmp) / "copies"
        scratch.mkdir()

        def copy_with(copier: Callable[[Path, Path], object]) -> Callable[[], None]:
            dest = scratch / f"c{time.perf_counter_ns()}"
            copier(src, dest)
            return lambda: shutil.rmtree(dest)

        results["copytree"] = best_ms(lambda: copy_with(lambda s, d: shutil.copytree(s, d, symlinks=True)), repeats)
        results["cp -a"] = best_ms(
            lambda: copy_with(lambda s, d: subprocess.run(["cp", "-a", str(s), str(d)], check=True)), repeats)
        results["copy_tree"] = best_ms(lambda: copy_with(copy_tree), repeats)

        def local_fork() -> Callable[[], None]:
            (copy,) = workspace.fork(1)
            return copy.close

        results["local fork"] = best_ms(local_fork, repeats)
        results["strategy"] = strategy_for(src)  # type: ignore[assignment]
        probe = scratch / "probe"
        copy_tree(src, probe)
        files = [p for p in probe.rglob("*") if p.is_file() and not p.is_symlink()]
        results["linked"] = f"{sum(p.stat().st_nlink > 1 for p in files)}/{len(files)}"  # type: ignore[assignment]
        shutil.rmtree(probe)
        workspace.close()
        if docker:
            from shadow_backend.docker_backend import DockerBackend

            holder: list[object] = []

            def create() -> Callable[[], None]:
                ws = DockerBackend.create(repo)
                holder.append(ws)
                return lambda: None

            results["docker create"] = best_ms(create, 1)
            dws = holder[0]

            def docker_fork() -> Callable[[], None]:
                (copy,) = dws.fork(1)  # type: ignore[attr-defined]
                return copy.close

            results["docker fork"] = best_ms(docker_fork, repeats)
            dws.close()  # type: ignore[attr-defined]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="+", default=[100, 5000])
    parser.add_argument("--file-kb", type=int, default=1, help="size of each generated file")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-docker", action="store_true")
    args = parser.parse_args()
    keys = ["copytree", "cp -a", "copy_tree", "local fork", "docker fork", "docker create"]
    print(f"{'files':>6} " + " ".join(f"{k:>13}" for k in keys) + "  strategy      linked/files  (best ms)")
    for files in args.files:
        r = bench_size(files, file_kb=args.file_kb, repeats=args.repeats, docker=not args.no_docker)
        cells = " ".join(f"{r[k]:13.1f}" if k in r else f"{'-':>13}" for k in keys)
        print(f"{files:>6} {cells}  {r['strategy']:<13} {r['linked']}")


if __name__ == "__main__":
    main()
