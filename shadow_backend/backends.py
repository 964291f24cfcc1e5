"""Pick a shadow backend by name; each is imported only when used."""

from __future__ import annotations

import os
from typing import Any

from harness.errors import ConfigError
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
    """A new shadow workspace in exactly the start state a session recorded."""
    return _backend_class(name).from_origin(origin)
