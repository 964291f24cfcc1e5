"""The bubblewrap sandbox of local commands: what a command sees of the host, and as whom it runs.

Threat model: sandbox

The command text, and every program it runs, is untrusted (the model wrote it, or the repository it
works on did). Trusted: the host, recap's own process, bwrap. `bwrap_argv` builds a new root from a
short allow-list instead of showing the host:

- read-only: the system directories (`/usr`, `/bin`, `/sbin`, `/lib*`, as symlinks where the
  host has merged /usr) and `/etc` minus its secrets: `shadow`, `gshadow`, `sudoers`, `ssh/`,
  `ssl/private/` and every entry other users may not read (masked by an empty, unreadable mount);
- read-only: the toolchain, i.e. the running interpreter's environment (`sys.prefix`,
  `sys.base_prefix`) and each directory PATH names (for a `.../bin` entry its parent, the
  prefix a virtualenv, pyenv or cargo keeps its files in; never `/`, $HOME, `/root`, `/home`,
  `/etc`, `/var`, `/run` or `/tmp` as a whole); known credential files in them are masked;
- writable: the workspace root and its $HOME only; a private, size-limited `/tmp` and
  `/dev/shm`; a minimal `/dev` (read-only) and the sandbox's own `/proc`;
- nothing else: no `/run`, `/var`, `/home`, `/root`, `/sys`, `/mnt`, no user repository (its
  `.git` is hidden if a bound directory holds it), hence no host UNIX socket (docker.sock, dbus,
  ...): a read-only mount would not stop `connect()`, an absent one does. Abstract sockets and
  the network are cut by the network namespace unless `network=True`.

The command runs in new user, PID, IPC, mount and (by default) network namespaces, with every
capability dropped, no further user namespaces, `no_new_privs`, as uid 1000 inside (the host
uid when recap is not root), its own session, and dies with recap. It can still read the
toolchain and /etc's public files, use CPU, and write its workspace up to the limits in
`LocalConfig` (`shadow_backend.limits`). Not covered: kernel bugs reachable from an
unprivileged process, side channels, and sockets or secrets a user placed inside a toolchain
directory on PATH (those directories are visible whole).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Sequence

logger = logging.getLogger(__name__)

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_SECRETS = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl/private",
                "security/opasswd", "docker")
"""Masked whatever their mode; every other /etc entry other users can't read is masked too."""
_TOOLCHAIN_SECRETS = ("credentials", "credentials.toml", ".credentials.toml", ".pypirc", ".netrc")
_NEVER_WHOLE = ("/", "/root", "/home", "/etc", "/var", "/run", "/tmp", "/proc", "/sys", "/dev", "/mnt",
                "/media", "/srv", "/opt", "/boot")
_ISOLATION = ["--unshare-user", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--die-with-parent",
              "--new-session"]


@functools.cache
def _supports(option: str) -> bool:
    """Whether this bwrap knows `option` (--disable-userns came in 0.8, --size in 0.7): an older
    one still sandboxes, without that option (the memory cgroup still bounds /tmp then)."""
    try:
        return option in subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def _isolation() -> list[str]:
    return _ISOLATION + (["--disable-userns"] if _supports("--disable-userns") else [])


def _tmpfs(path: str, size_bytes: int) -> list[str]:
    return (["--size", str(size_bytes)] if _supports("--size") else []) + ["--tmpfs", path]


def sandbox_ids() -> tuple[int, int]:
    """(uid, gid) commands have inside the sandbox: 1000 when recap runs as root, else the host's."""
    return (1000, 1000) if os.getuid() == 0 else (os.getuid(), os.getgid())


def _system_argv() -> list[str]:
    argv: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv


@functools.cache
def bwrap_works() -> bool:
    """Whether bubblewrap can make the namespaces and mounts commands run in (probed once per process)."""
    if shutil.which("bwrap") is None:
        return False
    probe = ["bwrap", *_isolation(), *_system_argv(), "--dev", "/dev", "--proc", "/proc", *_tmpfs("/tmp", 2**20),
             "--unshare-net", "--remount-ro", "/", "true"]
    try:
        result = subprocess.run(probe, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if result.returncode != 0:
        logger.info("bubblewrap does not work here: %s", result.stderr.decode(errors="replace").strip())
    return result.returncode == 0


def _masks(paths: Sequence[tuple[str, bool]]) -> list[str]:
    """bwrap arguments that hide each (path, is_dir): an empty read-only tmpfs, or /dev/null."""
    argv: list[str] = []
    for path, is_dir in paths:
        argv += ["--tmpfs", path, "--remount-ro", path] if is_dir else ["--ro-bind", "/dev/null", path]
    return argv


@functools.cache
def etc_secrets(etc: str = "/etc") -> tuple[tuple[str, bool], ...]:
    """Entries of `etc` commands must not see, as (path, is_dir): the named secrets and every
    file or directory other users may not read (a directory once, not what lies below it)."""
    found: dict[str, bool] = {}
    for name in _ETC_SECRETS:
        path = os.path.join(etc, name)
        if os.path.lexists(path) and not os.path.islink(path):
            found[path] = os.path.isdir(path)
    for top, dirs, files in os.walk(etc):
        for name in [*dirs, *files]:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if path in found or stat.S_ISLNK(st.st_mode):
                continue
            if stat.S_ISDIR(st.st_mode):
                if st.st_mode & (stat.S_IROTH | stat.S_IXOTH) != (stat.S_IROTH | stat.S_IXOTH):
                    found[path] = True
            elif not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IROTH:
                found[path] = False  # sockets and FIFOs too
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in found]
    return tuple(found.items())


def toolchain_dirs(path_var: str, prefixes: Sequence[str] | None = None) -> list[str]:
    """Host directories commands see read-only besides the system ones: the running
    interpreter's environment (`sys.prefix`, `sys.base_prefix`), each absolute PATH entry and the
    directory of each program a PATH entry links to elsewhere (e.g. /usr/local/bin/node ->
    /opt/node/bin/node); for a `bin` directory its parent, where a virtualenv keeps pyvenv.cfg and
    its lib/. None that lies below a system directory or another one of them, and never one of
    `_NEVER_WHOLE` or $HOME as a whole (a `~/bin` entry is bound alone). `prefixes` replaces the
    interpreter's environments (a project environment passes the base interpreter's alone)."""
    chosen = (sys.prefix, sys.base_prefix) if prefixes is None else tuple(prefixes)
    return list(_toolchain_dirs(path_var, str(Path.home().resolve()), *chosen))


@functools.cache
def _toolchain_dirs(path_var: str, home: str, *prefixes: str) -> tuple[str, ...]:
    never = {Path(p) for p in _NEVER_WHOLE} | {Path(home)}
    system = [Path(p).resolve() for p in _SYSTEM_DIRS if os.path.isdir(p)]
    on_path = list(dict.fromkeys(os.path.realpath(e) for e in path_var.split(os.pathsep) if os.path.isabs(e)))
    entries = [*prefixes, *on_path]
    for entry in on_path:
        try:
            targets = {os.path.realpath(e.path) for e in os.scandir(entry) if e.is_symlink()}
        except OSError:
            continue
        entries += [os.path.dirname(t) for t in targets if os.path.isfile(t)]
    found: list[Path] = []
    for entry in dict.fromkeys(entries):
        path = Path(entry).resolve()
        if path.name == "bin" and path.parent not in never:
            path = path.parent
        if path in never or not path.is_dir() or any(s == path or s in path.parents for s in system):
            continue
        if path not in found:
            found.append(path)
    return tuple(str(p) for p in found if not any(q in p.parents for q in found))


def bwrap_argv(*, writable: Sequence[Path], chdir: Path | str, path_var: str, hidden: Sequence[Path] = (),
               network: bool, tmp_size_bytes: int, binds: Sequence[tuple[Path, str, bool]] = (),
               prefixes: Sequence[str] | None = None, empty: Sequence[str] = ()) -> list[str]:
    """The `bwrap ... --` prefix that runs a command as the threat model above says.

    Args:
        writable: host directories bound read-write at the same path (the workspace, its $HOME).
        chdir: the working directory inside.
        path_var: the PATH commands get (names the toolchain directories to bind).
        hidden: host directories to show empty if a bound directory holds them (the user's .git).
        network: keep the host's network (and its resolv.conf) instead of a private one.
        tmp_size_bytes: size of the private /tmp and /dev/shm, each.
        binds: (host directory, path inside, writable) mounted elsewhere than at their host path
            (a project environment and the workspace at fixed paths, `shadow_backend.environment`).
        prefixes: the interpreter environments to bind (default: recap's own, see `toolchain_dirs`).
        empty: directories inside the sandbox shown empty and read-only (below a bind).
    """
    uid, gid = sandbox_ids()
    argv = ["bwrap", *_isolation(), "--uid", str(uid), "--gid", str(gid), *_system_argv(),
            "--ro-bind", "/etc", "/etc", *_masks(etc_secrets())]
    if network:
        resolv = Path("/etc/resolv.conf").resolve()
        if resolv.is_file() and not str(resolv).startswith("/etc/"):  # e.g. systemd-resolved's stub in /run
            argv += ["--ro-bind", str(resolv), str(resolv)]
    else:
        argv.append("--unshare-net")
    argv += ["--dev", "/dev", *_tmpfs("/dev/shm", tmp_size_bytes), "--remount-ro", "/dev",
             "--proc", "/proc", *_tmpfs("/tmp", tmp_size_bytes)]
    tools = toolchain_dirs(path_var, prefixes)
    for path in tools:
        argv += ["--ro-bind", path, path]
        argv += _masks([(str(f), False) for f in map(Path(path).joinpath, _TOOLCHAIN_SECRETS) if f.is_file()])
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    for host, inside, rw in binds:
        argv += ["--bind" if rw else "--ro-bind", str(host), inside]
    for inside in empty:
        argv += ["--tmpfs", inside, "--remount-ro", inside]
    bound = [Path(p) for p in (*_SYSTEM_DIRS, "/etc", *tools)]
    for path in hidden:  # the user's history is no answer source (the workspace's own is sealed)
        if path.is_dir() and any(b == path or b in path.parents for b in bound):
            argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
    return argv + ["--remount-ro", "/", "--chdir", str(chdir), "--"]
