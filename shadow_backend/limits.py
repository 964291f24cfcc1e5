"""Resource limits of the commands a workspace runs: a cgroup per command, and a disk quota check.

`CommandCgroup` puts one command (and everything it starts) in a fresh cgroup with a memory limit
and a process cap. The kernel charges a cgroup for all the memory its processes touch, private
or shared (`mmap(MAP_SHARED|MAP_ANONYMOUS)`, tmpfs files, `/dev/shm`), and `pids.max` holds for
root too, which `RLIMIT_AS`/`RLIMIT_DATA` and `RLIMIT_NPROC` do not. It works where this process
may write the cgroup file system: cgroup v2 (a subtree with the memory and pids controllers) or
v1 (the memory and pids hierarchies), as root or with a delegated subtree; elsewhere `create`
returns None and the caller falls back to rlimits (say so in the sandbox words).

`DiskQuota` bounds how much a workspace may grow on disk: its size (blocks of every file under
the given directories, hard links once) is measured when the workspace is made, and a command
is stopped once the size goes past that plus the quota; with `RLIMIT_FSIZE` (one file can't
exceed the quota) the overshoot is what is written between two checks.

The messages these return are what the model reads, e.g. "memory limit of 2 GiB reached: the
kernel killed a process of this command".
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

logger = logging.getLogger(__name__)

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()


def size_words(n: int) -> str:
    """`n` bytes in words: '2 GiB', '64 MiB', '512 KiB', '100 bytes'."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def tell(stderr: str, notes: Sequence[str]) -> str:
    """`stderr` with one `[recap] NOTE` line per note appended (what the model reads)."""
    if not notes:
        return stderr
    return stderr + ("" if not stderr or stderr.endswith("\n") else "\n") + "".join(f"[recap] {n}\n" for n in notes)


@dataclass(frozen=True)
class _Layout:
    """Where command cgroups are made: `parents` maps a controller ('memory', 'pids') to the
    directory children go under (one directory for both on v2)."""

    version: int
    parents: dict[str, Path]


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under '' its v2 path."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _can_make_children(parent: Path, needed: Sequence[str]) -> bool:
    probe = parent / f"recap-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return all((probe / name).exists() for name in needed)
    finally:
        probe.rmdir()


def _candidate_layouts() -> list[_Layout]:
    try:
        own = _own_paths()
    except OSError:
        return []
    if (_CGROUP_ROOT / "cgroup.controllers").exists():  # v2 mounted at the root
        found = []
        for parent in (_CGROUP_ROOT / own.get("", "/").lstrip("/"), _CGROUP_ROOT):
            try:
                enabled = (parent / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if {"memory", "pids"} <= set(enabled):
                found.append(_Layout(2, {"memory": parent, "pids": parent}))
        return found
    parents = {c: _CGROUP_ROOT / c / own.get(c, "/").lstrip("/") for c in ("memory", "pids")}
    return [_Layout(1, parents)] if all(p.is_dir() for p in parents.values()) else []


@functools.cache
def _layout() -> _Layout | None:
    """The first place commands' cgroups can be made here (probed once per process), else None."""
    files = {"memory": "memory.limit_in_bytes", "pids": "pids.max"}
    for layout in _candidate_layouts():
        needed = {c: ["memory.max", "pids.max"] if layout.version == 2 else [files[c]] for c in layout.parents}
        if all(_can_make_children(p, needed[c]) for c, p in layout.parents.items()):
            _remove_stale(layout)
            return layout
    logger.info("no writable cgroup here: memory and process limits fall back to rlimits")
    return None


def cgroups_available() -> bool:
    """Whether `CommandCgroup.create` can make cgroups here."""
    return _layout() is not None


def _remove_stale(layout: _Layout) -> None:
    """Remove empty command cgroups whose owner process is gone (left by a killed recap)."""
    for parent in set(layout.parents.values()):
        for child in parent.glob("recap-cmd-*"):
            owner = child.name.split("-")[2]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                try:
                    child.rmdir()
                except OSError:
                    pass


class CommandCgroup:
    """The cgroup(s) of one command: memory limit (swap included where the kernel accounts it)
    and process cap. Make with `create`, call `enter()` in the child before exec (a
    `preexec_fn`), and after the command `hits()`, then `close()` (kills what is left, removes
    the cgroup)."""

    def __init__(self, layout: _Layout, dirs: dict[str, Path], memory_bytes: int | None,
                 max_processes: int | None) -> None:
        self._layout, self.dirs = layout, dirs
        self._procs_files = [str(path / "cgroup.procs") for path in dict.fromkeys(dirs.values())]
        self.memory_bytes, self.max_processes = memory_bytes, max_processes

    @classmethod
    def create(cls, *, memory_bytes: int | None, max_processes: int | None) -> "CommandCgroup | None":
        """A fresh cgroup with these limits (None: no limit), or None where cgroups can't be made."""
        layout = _layout()
        if layout is None:
            return None
        name = f"recap-cmd-{os.getpid()}-{next(_names)}"
        dirs = {c: p / name for c, p in layout.parents.items()}
        made: list[Path] = []
        try:
            for path in dict.fromkeys(dirs.values()):
                path.mkdir()
                made.append(path)
            group = cls(layout, dirs, memory_bytes, max_processes)
            group._set_limits()
        except OSError as exc:
            for path in made:
                path.rmdir()
            logger.warning("could not make a command cgroup: %s", exc)
            return None
        return group

    def _set_limits(self) -> None:
        mem, pids = self.dirs["memory"], self.dirs["pids"]
        if self.max_processes is not None:
            (pids / "pids.max").write_text(str(self.max_processes))
        if self.memory_bytes is None:
            return
        if self._layout.version == 2:
            (mem / "memory.max").write_text(str(self.memory_bytes))
            if (mem / "memory.swap.max").exists():
                (mem / "memory.swap.max").write_text("0")
        else:
            (mem / "memory.limit_in_bytes").write_text(str(self.memory_bytes))
            if (mem / "memory.memsw.limit_in_bytes").exists():
                (mem / "memory.memsw.limit_in_bytes").write_text(str(self.memory_bytes))

    def enter(self) -> None:
        """Move the calling process into the cgroup (in the child, before exec: all it starts
        follows). Plain system calls only, as fits a forked child of a threaded process."""
        pid = str(os.getpid()).encode()
        for procs in self._procs_files:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def hits(self) -> list[str]:
        """What limits the command ran into, as sentences for the model (empty when none)."""
        found = []
        mem, pids = self.dirs["memory"], self.dirs["pids"]
        oom = _counter(mem / ("memory.events" if self._layout.version == 2 else "memory.oom_control"), "oom_kill")
        if self.memory_bytes is not None and oom:
            found.append(f"memory limit of {size_words(self.memory_bytes)} reached: the kernel killed "
                         f"{'a process' if oom == 1 else f'{oom} processes'} of this command (out of memory)")
        if self.max_processes is not None and _counter(pids / "pids.events", "max"):
            found.append(f"process limit of {self.max_processes} reached: starting a process or thread "
                         "failed (fork: Resource temporarily unavailable)")
        return found

    def close(self) -> None:
        """SIGKILL whatever still runs in the cgroup and remove it (waits up to ~2 s for the exits)."""
        dirs = list(dict.fromkeys(self.dirs.values()))
        deadline = time.monotonic() + 2.0
        while dirs:
            for path in list(dirs):
                for pid in _pids(path):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    path.rmdir()
                    dirs.remove(path)
                except FileNotFoundError:
                    dirs.remove(path)
                except OSError:
                    pass
            if dirs and time.monotonic() > deadline:
                logger.warning("command cgroup not removed (processes still exiting): %s", dirs)
                return
            if dirs:
                time.sleep(0.02)


class ContainerEvents:
    """Limit events of a Docker container's cgroup, read from the host (cgroupfs or systemd
    driver, v1 or v2): `count()` gives (out-of-memory kills, failed forks at pids.max) so far,
    and `hits(before, ...)` the sentences for what a command added. Where the host does not show
    the container's cgroup, counts stay (0, 0) and nothing is told."""

    def __init__(self, container_id: str) -> None:
        names = [f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"]
        v1 = {c: next((d for n in names if (d := _CGROUP_ROOT / c / n).is_dir()), None) for c in ("memory", "pids")}
        v2 = next((d for n in names if (d := _CGROUP_ROOT / n).is_dir()), None)
        self._oom = v1["memory"] / "memory.oom_control" if v1["memory"] else (v2 / "memory.events" if v2 else None)
        self._pids = v1["pids"] / "pids.events" if v1["pids"] else (v2 / "pids.events" if v2 else None)

    def count(self) -> tuple[int, int]:
        return (_counter(self._oom, "oom_kill") if self._oom else 0, _counter(self._pids, "max") if self._pids else 0)

    def hits(self, before: tuple[int, int], *, memory: str, processes: int) -> list[str]:
        oom, forks = (after - was for after, was in zip(self.count(), before))
        found = []
        if oom > 0:
            found.append(f"memory limit of {memory} reached: the kernel killed "
                         f"{'a process' if oom == 1 else f'{oom} processes'} of this command (out of memory)")
        if forks > 0:
            found.append(f"process limit of {processes} reached: starting a process or thread failed "
                         "(fork: Resource temporarily unavailable)")
        return found


def _pids(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _counter(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file ('oom_kill 1'), 0 when absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def disk_usage(dirs: Sequence[str | os.PathLike[str]]) -> int:
    """Bytes of disk the files under `dirs` take (allocated blocks; a hard-linked inode once;
    symlinks not followed; what vanishes during the walk is skipped)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [os.fspath(d) for d in dirs]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_nlink > 1:
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


class DiskQuota:
    """How much the files under `dirs` may grow beyond their size now: `quota_bytes`.

    `check()` says (a sentence for the model) when the quota is used up and the files grew since
    the last check, else None. A running command is checked every `interval_s`, which grows with the cost of a walk (ten times its duration, at
    least `min_interval_s`) so that big trees are not walked back to back."""

    def __init__(self, dirs: Sequence[str | os.PathLike[str]], quota_bytes: int, *,
                 min_interval_s: float = 0.5) -> None:
        self.dirs = [os.fspath(d) for d in dirs]
        self.quota_bytes = quota_bytes
        self.min_interval_s = min_interval_s
        started = time.monotonic()
        self.baseline = disk_usage(self.dirs)
        self._last = 0
        self.interval_s = max(min_interval_s, 10 * (time.monotonic() - started))

    def written(self) -> int:
        """Bytes the files grew since the quota was set (negative when they shrank)."""
        started = time.monotonic()
        self._last = disk_usage(self.dirs) - self.baseline
        self.interval_s = max(self.min_interval_s, 10 * (time.monotonic() - started))
        return self._last

    def start(self) -> None:
        """Call before a command: when the quota is used up already, note the size now, so that
        `check` stops the command only if it makes the files grow (a command may delete files)."""
        if self._last > self.quota_bytes:
            self.written()

    def check(self) -> str | None:
        """None while the files are within the quota or did not grow since the last check, else
        a sentence saying the quota is used up."""
        before = self._last
        written = self.written()
        if written <= self.quota_bytes or written <= before:
            return None
        return (f"disk quota of {size_words(self.quota_bytes)} for the workspace reached "
                f"({size_words(max(written, 0))} written since it was made); delete files to go on")
