"""Pick a shadow backend by name; each is imported only when used.

A backend's options (its limits, its sandbox) come from the `[backend.<name>]` table of the
config file, whose keys are the fields of `LocalConfig` / `DockerConfig`:

    [backend.local]
    memory_limit_bytes = 2147483648   # one command, shared memory and tmpfs included
    max_processes = 1024              # holds for root too (a cgroup's pids.max)
    tmp_size_bytes = 536870912        # the private /tmp (and /dev/shm)
    disk_quota_bytes = 1073741824     # how much the workspace may grow

    [backend.docker]
    mem_limit = "2g"
    pids_limit = 512
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, Mapping

from harness.errors import ConfigError, WorkspaceError
from harness.workspace import Environment, Workspace, WorkspaceOrigin

BACKENDS = ("local", "docker")


def _backend_class(name: str) -> Any:
    if name == "local":
        from shadow_backend.local import LocalBackend

        return LocalBackend
    if name == "docker":
        from shadow_backend.docker_backend import DockerBackend

        return DockerBackend
    raise ConfigError(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}")


def backend_config(name: str, options: Mapping[str, Any] | None = None) -> Any:
    """The validated config of backend `name` (`LocalConfig` or `DockerConfig`) from `options`
    (field name -> value; missing fields keep their defaults).

    Raises: ConfigError for an unknown backend, an unknown option (the valid ones are listed) or a bad value.
    """
    _backend_class(name)
    if name == "local":
        from shadow_backend.local import LocalConfig as config_class
    else:
        from shadow_backend.docker_backend import DockerConfig as config_class
    options = dict(options or {})
    known = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in [backend.{name}]: {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
    return config_class(**options)


def read_backend_options(path: str | os.PathLike[str] | None, name: str) -> dict[str, Any]:
    """The `[backend.<name>]` table of the TOML file at `path` ({} when there is no file or table).

    Raises: ConfigError when the file is not valid TOML or the table is not a table.
    """
    if path is None:
        return {}
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    table = data.get("backend", {}).get(name, {}) if isinstance(data.get("backend", {}), Mapping) else None
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: [backend.{name}] must be a table of options")
    return dict(table)


def open_backend(
    name: str, repo: str | os.PathLike[str], *, buffers: dict[str, str] | None = None, config: Any = None,
    env: Environment | None = None,
) -> Workspace:
    """A new shadow workspace of `repo` (HEAD plus the user's changes plus `buffers`); `config`
    is the backend's (`backend_config`; None: the defaults); `env` the project environment its
    commands run in (`shadow_backend.environment.resolve`; None: the host toolchain).

    Raises: ConfigError for an unknown backend name, or an environment on a backend without
    environments; WorkspaceError when creation (or the environment's set-up) fails.
    """
    if env is None:
        return _backend_class(name).create(repo, buffers=buffers, config=config)
    _check_env(name)
    return _backend_class(name).create(repo, buffers=buffers, config=config, env=env)


def _check_env(name: str) -> None:
    if name != "local":
        raise ConfigError(f"project environments (--setup) run on the local backend only so far, not {name!r}; "
                          "use --backend local or --setup none")


def rebuild_backend(name: str, origin: WorkspaceOrigin, *, config: Any = None) -> Workspace:
    """A new shadow workspace in exactly the start state a session recorded (`config` as in
    `open_backend`), its environment (`origin.env`) rebuilt or reused from the cache.

    The origin comes from a session file, which is untrusted: whatever it holds that the file
    system refuses (a name too long...) is a `WorkspaceError` like any other unbuildable state.

    Raises: ConfigError for an unknown backend name; WorkspaceError when the state cannot be built.
    """
    if origin.env is not None:
        _check_env(name)
    cls = _backend_class(name)
    try:
        return cls.from_origin(origin, config=config)
    except (OSError, ValueError) as exc:
        raise WorkspaceError(str(exc)) from exc
