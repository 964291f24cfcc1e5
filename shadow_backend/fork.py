"""Copying a workspace directory for `fork()`: as cheaply as the file system allows, never unsafely.

Strategy, per fork:

- **reflink** (copy-on-write clones: btrfs, XFS, bcachefs, ZFS 2.2+): every file is cloned with
  `cp -a --reflink=always`; no data is copied and each copy can be written in place freely.
- otherwise **link-objects**: git's object files (`.git/objects/**` of a workspace root, `objects/**`
  of recap's git directory) are hard-linked, since git never writes an object file in place (new
  objects are written to a temp file and renamed, and they are read-only); everything else, the
  working tree included, is copied with `cp -a --reflink=auto`. The working tree is *not*
  hard-linked: a command appending in place (`echo x >> f`, `open(f, "r+")`) would write through
  the link into the other copies.

`probe_reflink(dir)` tells which applies (the answer is cached per device).
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from harness.errors import WorkspaceError

log = logging.getLogger(__name__)

Strategy = Literal["reflink", "link-objects"]
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
_probe_cache: dict[int, bool] = {}


def probe_reflink(directory: str | os.PathLike[str]) -> bool:
    """Whether files in `directory`'s file system can be cloned (FICLONE), cached per device."""
    device = os.stat(directory).st_dev
    if device not in _probe_cache:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".recap-probe-") as src, \
                tempfile.NamedTemporaryFile(dir=directory, prefix=".recap-probe-") as dst:
            src.write(b"probe")
            src.flush()
            try:
                fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
                _probe_cache[device] = True
            except OSError:
                _probe_cache[device] = False
    return _probe_cache[device]


def strategy_for(directory: str | os.PathLike[str]) -> Strategy:
    return "reflink" if probe_reflink(directory) else "link-objects"


def _cp(args: list[str]) -> None:
    done = subprocess.run(["cp", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise WorkspaceError(f"copying the workspace failed: {done.stderr.strip()}")


def copy_tree(source: str | os.PathLike[str], dest: str | os.PathLike[str], *,
              link_objects: str | None = ".git/objects") -> Strategy:
    """Copy the directory `source` to `dest` (which must not exist), keeping modes, symlinks and
    times; see the module docstring for how. Returns the strategy used.

    Args:
        link_objects: where the git object directory lies in `source` (a workspace root: its
            `.git/objects`; a bare git directory: "objects"), hard-linked under "link-objects";
            None: nothing is hard-linked. A symlink on that path is copied as a symlink, never
            followed.
    Raises: WorkspaceError when the copy fails (the partial `dest` is left for the caller).
    """
    src, dst = Path(source), Path(dest)
    if dst.exists():
        raise WorkspaceError(f"fork destination {dst} already exists")
    strategy = strategy_for(src)
    if strategy == "reflink":
        _cp(["-a", "--reflink=always", "-T", str(src), str(dst)])
        return strategy
    parts = Path(link_objects).parts if link_objects else ()
    chain = [src.joinpath(*parts[:n]) for n in range(1, len(parts) + 1)]
    if not parts or not all(p.is_dir() and not p.is_symlink() for p in chain):
        _cp(["-a", "--reflink=auto", "-T", str(src), str(dst)])
        return strategy
    here_src, here_dst = src, dst
    for name in parts:  # copy every level but the objects directory, then link that
        here_dst.mkdir()
        os.chmod(here_dst, os.stat(here_src).st_mode)
        rest = [str(p) for p in here_src.iterdir() if p.name != name]
        if rest:
            _cp(["-a", "--reflink=auto", *rest, str(here_dst)])
        here_src, here_dst = here_src / name, here_dst / name
    _cp(["-a", "--link", str(here_src), str(here_dst)])
    return strategy
