"""Pick a shadow backend by name; each is imported only when used."""

from __future__ import annotations

import os
from typing import Any

from harness.errors import ConfigError, WorkspaceError
from harness.workspace import Workspace, WorkspaceOrigin

BACKENDS = ("local", "docker")


def _backend_class(name: str) -> Any:
    if name == "local":
        from shadow_backend.local import LocalBackend

        return LocalBackend
    if name == "docker":
        from shadow_backend.docker_backend import DockerBackend

        return DockerBackend
    raise ConfigError(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}")


def open_backend(
    name: str, repo: str | os.PathLike[str], *, buffers: dict[str, str] | None = None
) -> Workspace:
    """A new shadow workspace of `repo` (HEAD plus the user's changes plus `buffers`).

    Raises: ConfigError for an unknown backend name; WorkspaceError when creation fails.
    """
    return _backend_class(name).create(repo, buffers=buffers)


def rebuild_backend(name: str, origin: WorkspaceOrigin) -> Workspace:
    """A new shadow workspace in exactly the start state a session recorded.

    The origin comes from a session file, which is untrusted: whatever it holds that the file
    system refuses (a name too long...) is a `WorkspaceError` like any other unbuildable state.

    Raises: ConfigError for an unknown backend name; WorkspaceError when the state cannot be built.
    """
    cls = _backend_class(name)
    try:
        return cls.from_origin(origin)
    except (OSError, ValueError) as exc:
        raise WorkspaceError(str(exc)) from exc
