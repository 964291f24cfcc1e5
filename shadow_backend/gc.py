"""Owner records and garbage collection of what a crashed process left behind.

Every Docker workspace container carries labels naming its owner process (pid and the process's
start time, so that a recycled pid does not keep a dead owner's container alive). Every host
directory a backend creates for a workspace gets an owner record next to it,
`<dir>.recap-owner` (JSON: pid, start, host). `collect_garbage()` removes containers and
directories whose owner process is gone; `recap backend gc` calls it, and so does the Docker
backend on start-up (once per process).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LABEL = "recap.workspace"
OWNER_SUFFIX = ".recap-owner"


def process_start(pid: int) -> int | None:
    """Start time of process `pid` in clock ticks since boot (/proc/PID/stat field 22), or None
    when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def owner_record() -> dict[str, str]:
    """The calling process as an owner: {"pid", "start", "host"} (strings, usable as labels)."""
    pid = os.getpid()
    return {"pid": str(pid), "start": str(process_start(pid) or 0), "host": socket.gethostname()}


def owner_alive(record: dict[str, Any]) -> bool:
    """Whether the owner described by `record` still runs. Records from another host count as
    alive (this machine cannot tell)."""
    if record.get("host") and record["host"] != socket.gethostname():
        return True
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    start = process_start(pid)
    return start is not None and str(start) == str(record.get("start"))


def claim_dir(path: str | os.PathLike[str]) -> None:
    """Record the calling process as owner of the directory `path` (written before use)."""
    Path(str(path) + OWNER_SUFFIX).write_text(json.dumps(owner_record()))


def release_dir(path: str | os.PathLike[str]) -> None:
    """Remove the directory `path` and its owner record. Missing ones are fine."""
    shutil.rmtree(path, ignore_errors=True)
    Path(str(path) + OWNER_SUFFIX).unlink(missing_ok=True)


@dataclass(frozen=True)
class GcReport:
    """What `collect_garbage` removed.

    Attributes:
        containers: names of removed containers.
        dirs: removed host directories.
        duration_s: wall-clock seconds.
    """

    containers: tuple[str, ...]
    dirs: tuple[str, ...]
    duration_s: float


def _collect_dirs(temp_root: Path) -> list[str]:
    removed = []
    for marker in sorted(temp_root.glob("*" + OWNER_SUFFIX)):
        try:
            record = json.loads(marker.read_text())
        except (OSError, ValueError):
            record = {}
        if owner_alive(record):
            continue
        target = Path(str(marker)[: -len(OWNER_SUFFIX)])
        release_dir(target)
        removed.append(str(target))
    return removed


def _collect_containers(client: Any) -> list[str]:
    import docker.errors

    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        labels = container.labels
        record = {"pid": labels.get("recap.owner_pid"), "start": labels.get("recap.owner_start"),
                  "host": labels.get("recap.owner_host")}
        if owner_alive(record):
            continue
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        removed.append(container.name)
    return removed


def collect_garbage(*, docker: bool = True, temp_root: str | os.PathLike[str] | None = None) -> GcReport:
    """Remove workspace containers and directories whose owner process is gone.

    Args:
        docker: also collect containers (needs a running daemon; skipped with a log line when
            none answers).
        temp_root: where workspace directories live (default: `tempfile.gettempdir()`).
    Returns:
        `GcReport`.
    """
    started = time.monotonic()
    containers: list[str] = []
    if docker:
        from harness.errors import WorkspaceError
        from shadow_backend.image import docker_client

        try:
            client = docker_client()
        except WorkspaceError as exc:
            log.info("gc: no Docker daemon, containers not collected: %s", exc)
        else:
            containers = _collect_containers(client)
    dirs = _collect_dirs(Path(temp_root or tempfile.gettempdir()))
    return GcReport(containers=tuple(containers), dirs=tuple(dirs), duration_s=time.monotonic() - started)
