"""Fixtures of the shadow backend tests: small git repositories and workspaces on both backends.

Docker tests need a running dockerd and the `recap-base` image (`recap backend build-image`);
CI provides both (scripts/services.sh). They are never skipped: without them they fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

BACKENDS = ("local", "docker")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository at `root` with `files` committed once."""
    root.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    commit(root, "initial")
    return root


def commit(root: Path, message: str) -> str:
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD").strip()


SMALL_FILES = {
    "README.md": "# demo\n",
    "pkg/__init__.py": "",
    "pkg/calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("repo") / "demo", SMALL_FILES)


@pytest.fixture(scope="module", params=BACKENDS)
def shared_workspace(request: pytest.FixtureRequest, small_repo: Path) -> Iterator[object]:
    """One workspace per backend for a whole test module (containers cost ~0.5 s each)."""
    from shadow_backend.backends import open_backend

    workspace = open_backend(request.param, small_repo)
    yield workspace
    workspace.close()
