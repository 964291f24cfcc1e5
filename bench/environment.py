"""Cost of a project environment on the local backend (ms; best of N where repeated).

    .venv/bin/python -m bench.environment [--files 100] [--repeats 5] [--setup "pip install -e . pytest"]

It generates a small src-layout package (a pyproject.toml, `--files` modules and a test), then prints:

    first set-up       LocalBackend.create with the environment and an empty cache (venv + the
                       set-up command; pip's own cache is shared with later runs, so a second run
                       of this bench is faster than a truly cold one)
    create, no env     LocalBackend.create without an environment
    create, cached env LocalBackend.create with the environment already built (goal: under 100 ms
                       more than without)
    fork, no env       LocalWorkspace.fork(1) without an environment
    fork, with env     LocalWorkspace.fork(1) of a workspace with the environment
    verify             pytest of the package in the environment, for scale

The environment cache is a temporary folder (RECAP_CACHE_DIR), removed at the end. Needs
bubblewrap and network access to the package index.
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

from harness.workspace import Environment  # noqa: E402
from shadow_backend.local import LocalBackend  # noqa: E402


def make_project(root: Path, files: int) -> Path:
    (root / "src" / "benchpkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = '
                                         '"setuptools.build_meta"\n[project]\nname = "benchpkg"\nversion = "0.1"\n')
    for i in range(files):
        (root / "src" / "benchpkg" / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    (root / "src" / "benchpkg" / "__init__.py").write_text("")
    (root / "tests" / "test_m.py").write_text("from benchpkg.m0 import f0\n\ndef test_f0():\n    assert f0(1) == 1\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b",
           "PATH": os.environ["PATH"], "HOME": str(root)}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True)
    return root


def best_ms(action: Callable[[], Callable[[], None]], repeats: int) -> float:
    """Best wall time (ms) of `action()`; what it returns is called afterwards, untimed (clean-up)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        cleanup = action()
        times.append((time.perf_counter() - started) * 1000)
        cleanup()
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--setup", default="pip install -e . pytest")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="recap-bench-env-") as tmp:
        os.environ["RECAP_CACHE_DIR"] = str(Path(tmp) / "cache")
        repo = make_project(Path(tmp) / "project", args.files)
        env = Environment(setup=args.setup)
        started = time.perf_counter()
        first = LocalBackend.create(repo, env=env)
        print(f"first set-up        {(time.perf_counter() - started) * 1000:10.0f} ms  ({args.setup})")

        def create(with_env: bool) -> Callable[[], None]:
            ws = LocalBackend.create(repo, env=env if with_env else None)
            return ws.close

        plain = best_ms(lambda: create(False), args.repeats)
        cached = best_ms(lambda: create(True), args.repeats)
        print(f"create, no env      {plain:10.1f} ms")
        print(f"create, cached env  {cached:10.1f} ms  (+{cached - plain:.1f} ms)")
        bare = LocalBackend.create(repo)
        for name, ws in (("fork, no env", bare), ("fork, with env", first)):
            print(f"{name:<19} {best_ms(lambda: ws.fork(1)[0].close, args.repeats):10.1f} ms")
        started = time.perf_counter()
        result = first.run("python -m pytest -q -p no:cacheprovider", timeout_s=300)
        print(f"verify              {(time.perf_counter() - started) * 1000:10.1f} ms  (exit {result.exit_code})")
        bare.close()
        first.close()
        shutil.rmtree(Path(tmp) / "cache", ignore_errors=True)


if __name__ == "__main__":
    main()
