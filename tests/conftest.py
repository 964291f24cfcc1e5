"""Fixtures shared by every test package: git repositories in `tmp_path` and workspaces of them.

- `make_repo(files, *, staged=..., unstaged=..., untracked=..., deleted=..., git=True)`: a factory
  that writes a repository and returns its path.
- `workspace`: a workspace of a small sample repository (`SAMPLE_FILES`), once per backend in
  `WORKSPACE_BACKENDS`; `workspace_of(repo, **options)` opens more (closed after the test);
  `open_workspace(backend, repo)` is the factory behind both.
- `git_cmd(root, *args)`: git with a fixed identity and no user configuration.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pytest

WORKSPACE_BACKENDS = ["local", "docker"]
"""Backends the `workspace` fixture is parametrized over."""

SAMPLE_FILES: dict[str, str | bytes] = {
    "README.md": "# sample\n\nA small project.\n",
    ".gitignore": "*.log\nbuild/\n",
    "pkg/__init__.py": "",
    "pkg/calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    "pkg/util/strings.py": "def shout(text):\n    return text.upper()\n",
    "tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    "web/app.js": "function start() {\n  return 1;\n}\n",
}


def open_workspace(backend: str, repo: Path, **options: Any) -> Any:
    """A new workspace of `repo` on `backend` (keyword `options` go to the backend's `create`)."""
    if backend == "local":
        from shadow_backend.local import LocalBackend

        return LocalBackend.create(repo, **options)
    if backend == "docker":
        from shadow_backend.docker_backend import DockerBackend

        return DockerBackend.create(repo, **options)
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(WORKSPACE_BACKENDS)}")


def run_git(root: Path, *args: str) -> str:
    """Run git in `root` (fixed identity, no user config) and return its stdout."""
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def _write(root: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)


RepoFactory = Callable[..., Path]


@pytest.fixture
def make_repo(tmp_path: Path) -> RepoFactory:
    """Factory: `make_repo(files, *, name="repo", staged=None, unstaged=None, untracked=None,
    deleted=(), git=True) -> Path`.

    `files` are committed ("initial"); then `staged` files are written and `git add`-ed,
    `unstaged` and `untracked` files are written only, and `deleted` paths are removed from the
    working tree. With `git=False` it is a plain directory holding `files`.
    """

    def make(files: Mapping[str, str | bytes] | None = None, *, name: str = "repo",
             staged: Mapping[str, str | bytes] | None = None, unstaged: Mapping[str, str | bytes] | None = None,
             untracked: Mapping[str, str | bytes] | None = None, deleted: tuple[str, ...] = (),
             git: bool = True) -> Path:
        root = tmp_path / name
        root.mkdir(parents=True)
        _write(root, files if files is not None else SAMPLE_FILES)
        if not git:
            return root
        run_git(root, "init", "-q", "-b", "main")
        run_git(root, "add", "-A")
        run_git(root, "commit", "-qm", "initial")
        if staged:
            _write(root, staged)
            run_git(root, "add", "--", *staged)
        _write(root, unstaged or {})
        _write(root, untracked or {})
        for rel in deleted:
            (root / rel).unlink()
        return root

    return make


@pytest.fixture
def git_cmd() -> Callable[..., str]:
    """`git_cmd(root, *args) -> stdout`: git with a fixed identity and no user configuration."""
    return run_git


@pytest.fixture(params=WORKSPACE_BACKENDS)
def workspace_of(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Factory `workspace_of(repo, **options)` on each backend; every workspace is closed after the test."""
    opened: list[Any] = []

    def open_(repo: Path, **options: Any) -> Any:
        opened.append(open_workspace(request.param, repo, **options))
        return opened[-1]

    yield open_
    for ws in opened:
        ws.close()


@pytest.fixture
def workspace(workspace_of: Callable[..., Any], make_repo: RepoFactory) -> Any:
    """A workspace of `SAMPLE_FILES` (committed, no pending changes), on each backend."""
    return workspace_of(make_repo())
