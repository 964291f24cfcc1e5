"""The `Workspace` protocol: the only way tools touch files and run commands.

The consumer (the harness) owns the interface; backends in `shadow_backend` (local directory,
Docker container) match it structurally. Paths are POSIX, relative to the workspace root;
anything that would leave the root raises `PathOutsideWorkspace`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol, Sequence, runtime_checkable

from harness.errors import PathOutsideWorkspace


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one command.

    Attributes:
        exit_code: the process exit status; -9 (or the negated signal) when killed, 127 when the
            program was not found.
        stdout, stderr: decoded as UTF-8 with replacement; not yet truncated.
        timed_out: True when the timeout fired and the process group was killed.
        duration_s: wall-clock seconds.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float


@runtime_checkable
class Workspace(Protocol):
    """An isolated replica of a repository where the agent acts.

    All `path` arguments are workspace-relative POSIX paths ("." is the root).
    Errors: `PathOutsideWorkspace` for a path leaving the root, `FileNotFoundError`,
    `IsADirectoryError`, `NotADirectoryError` as for the host file system.
    """

    @property
    def root(self) -> str:
        """Where the files live on the host (for display and host-side tools)."""
        ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or overwrite a file, creating parent directories."""
        ...

    def delete(self, path: str) -> None:
        """Delete a file (not a directory)."""
        ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def list_files(self, path: str = ".") -> list[str]:
        """Every file below `path`, recursively, sorted, as workspace-relative POSIX paths.

        `.git` and paths ignored by the repository's `.gitignore` are left out.
        """
        ...

    def run(self, command: str | Sequence[str], *, timeout_s: float) -> CommandResult:
        """Run a command with the workspace root as cwd.

        A `str` runs through `bash -c`; a sequence is executed directly. On timeout the whole
        process group is killed and the result has `timed_out=True` (no exception).
        """
        ...

    def interrupt(self) -> None:
        """Kill the commands running now; callable from any thread (cancelling a session
        mid-command). Each interrupted `run` returns what its command printed so far."""
        ...

    def diff(self) -> str:
        """Unified diff (git format, `a/` `b/` prefixes) of the current state against the start state."""
        ...

    def close(self) -> None:
        """Release every resource (directories, containers). Idempotent."""
        ...


def confine(root: str | os.PathLike[str], path: str) -> Path:
    """Resolve a workspace-relative `path` under `root` on the host file system.

    Returns:
        The absolute host path (symlinks resolved).
    Raises:
        PathOutsideWorkspace: `path` is absolute, contains `..` that climbs out, or resolves
            (through symlinks) to a place outside `root`.
    """
    if not isinstance(path, str) or path == "":
        raise PathOutsideWorkspace("empty path; use '.' for the workspace root")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        raise PathOutsideWorkspace(
            f"absolute path {path!r} refused: use a path relative to the workspace root"
        )
    if ".." in pure.parts:
        raise PathOutsideWorkspace(f"path {path!r} refused: '..' is not allowed")
    base = Path(root).resolve()
    target = (base / pure).resolve()
    if target != base and base not in target.parents:
        raise PathOutsideWorkspace(f"path {path!r} refused: it resolves outside the workspace")
    if pure.parts and pure.parts[0] == ".git":
        raise PathOutsideWorkspace(f"path {path!r} refused: the .git directory is sealed")
    return target


@dataclass(frozen=True)
class Environment:
    """The project's own toolchain, made by a set-up command (`shadow_backend.environment`).

    Attributes:
        setup: the shell command that builds it (e.g. "pip install -e . pytest"), run once per key
            with network access, in a fresh virtualenv that is first on the commands' PATH.
        include: git-ignored files or glob patterns (workspace-relative) copied from the user's
            checkout into every workspace.
        key: what the built environment is cached under (a hash of `setup`, `include`, the files
            that define the environment and the interpreter); "" until a backend has built it.
        output: the set-up command's output when it was built (bounded), "" until then.
    """

    setup: str
    include: tuple[str, ...] = ()
    key: str = ""
    output: str = ""


@dataclass(frozen=True)
class WorkspaceOrigin:
    """Where a shadow workspace came from: what a session records to rebuild its start state.

    Attributes:
        repo: the user's repository (absolute path) or a description of the source.
        base_commit: the commit the workspace starts from (None for a non-git directory).
        base_diff: binary-safe unified diff from `base_commit` to the start state
            (staged + unstaged + untracked-not-ignored changes).
        buffers: unsaved editor buffers applied on top (workspace-relative path -> text).
        sandbox: how commands are isolated, in words ("bwrap: no network", "none: bubblewrap missing",
            "docker: network_mode=none").
        env: the project environment commands run in (None: the host toolchain as it is).
    """

    repo: str
    base_commit: str | None = None
    base_diff: str = ""
    buffers: dict[str, str] = field(default_factory=dict)
    sandbox: str = ""
    env: Environment | None = None
