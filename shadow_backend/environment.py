"""Project environments: what the agent's commands and the verify command run the project with.

An environment is a set-up command (`harness.workspace.Environment.setup`) whose result is cached
under a key made of the command, the files that define the environment (`DEFINING_FILES`,
`requirements*.txt`) and the interpreter. Where it comes from, first match wins:

    recap run --setup "pip install -e . pytest"     the option (also on replay, eval, train,
                                                    sessions mine, tasks make); "none" turns it off
    recap.toml at the repository root:              [env]
                                                    setup = "pip install -e .[test]"
                                                    include = ["src/pkg/_version.py"]
    detection                                       `detect_setup`: requirements*.txt, then
                                                    pyproject.toml / setup.py (its test extra), + pytest

A built environment is a directory holding `venv/` (a virtualenv made at `ENV_MOUNT`, where every
sandbox sees it), `overlay/` (the files the set-up wrote or changed in the workspace, e.g. a
generated `_version.py` or `*.egg-info`, copied into every later workspace of the key) and
`output.txt`. The workspace is mounted at `WORKSPACE_MOUNT` while the set-up runs and whenever a
command runs, so an editable install resolves into whichever workspace (or fork) runs it.

Threat model: environment

The set-up command is untrusted: it may come from the repository (recap.toml, or what `pip install`
runs: setup.py, build backends). It runs in the local sandbox (`shadow_backend.sandbox`) like any
command, with two differences: it has the host's network (to reach the package index; the sandbox
cannot narrow that to one host) and two more writable directories, the environment under
construction and recap's pip cache (`cache_dir()/pip`, shared by every set-up; a set-up can
therefore plant packages a later set-up of another project installs, inside the sandbox, never
outside). recap's own virtualenv and its site-packages are not visible to it or to commands. Agent
commands see the environment read-only, so nothing an episode does changes what a later workspace
reuses. An environment is built under a temporary name and renamed when complete, under a lock: a
half-built one is never used. Include patterns are confined to the repository (no `..`, no
absolute paths, nothing through a symlink that leaves it, never `.git`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shlex
import shutil
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Iterator

from harness.errors import ConfigError, PathOutsideWorkspace
from harness.workspace import Environment, confine

log = logging.getLogger(__name__)

ENV_MOUNT = "/recap/env"
"""Where the environment's virtualenv is, inside the sandbox (read-only for commands)."""
WORKSPACE_MOUNT = "/workspace"
"""Where the workspace is, inside the sandbox, whenever it has an environment."""
PIP_CACHE_MOUNT = "/recap/pip-cache"
DEFINING_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "uv.lock", "tox.ini", "recap.toml")
"""Files whose contents (with every `requirements*.txt` at the root) are part of the key."""
_KEY_VERSION = "2"
_TEST_EXTRAS = ("test", "tests", "testing")
_MAX_OUTPUT_CHARS = 20_000


def cache_dir() -> Path:
    """recap's cache: $RECAP_CACHE_DIR, else $XDG_CACHE_HOME/recap, else ~/.cache/recap."""
    if os.environ.get("RECAP_CACHE_DIR"):
        return Path(os.environ["RECAP_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recap"


def _requirements(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("requirements*.txt") if p.is_file() and not p.is_symlink())


def detect_setup(root: Path) -> str | None:
    """A set-up command guessed from the repository's files, or None for a project with none of
    them: `pip install -r` each `requirements*.txt`, then `pip install -e .` (with its `test`,
    `tests` or `testing` extra when pyproject.toml or setup.cfg declares one) for a pyproject.toml
    or setup.py, then pytest."""
    parts = [f"pip install -r {shlex.quote(p.name)}" for p in _requirements(root) if "doc" not in p.name]
    if (root / "pyproject.toml").is_file() or (root / "setup.py").is_file():
        extras = [e for e in _declared_extras(root) if e in _TEST_EXTRAS][:1]
        parts.append(f"pip install -e {shlex.quote('.[' + extras[0] + ']') if extras else '.'}")
    if not parts:
        return None
    return " && ".join([*parts, "pip install pytest"])


def _declared_extras(root: Path) -> list[str]:
    extras: list[str] = []
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        extras += list(data.get("project", {}).get("optional-dependencies", {}))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
        pass
    try:
        import configparser

        parser = configparser.ConfigParser()
        parser.read_string((root / "setup.cfg").read_text(encoding="utf-8"))
        if parser.has_section("options.extras_require"):
            extras += list(parser["options.extras_require"])
    except (OSError, UnicodeDecodeError, configparser.Error):
        pass
    return extras


def read_project_config(root: Path) -> Environment | None:
    """The `[env]` table of `root/recap.toml` (setup: str, include: list of str), or None.

    Raises: ConfigError for invalid TOML or wrongly typed fields."""
    path = root / "recap.toml"
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    table = data.get("env")
    if table is None:
        return None
    if not isinstance(table, dict) or not isinstance(table.get("setup", ""), str) \
            or not isinstance(table.get("include", []), list) or not all(isinstance(i, str) for i in table.get("include", [])):
        raise ConfigError(f"{path}: [env] wants setup = \"command\" and include = [\"path or glob\", ...]")
    unknown = sorted(set(table) - {"setup", "include"})
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) in [env]: {', '.join(unknown)}; valid: include, setup")
    return Environment(setup=table.get("setup", ""), include=tuple(table.get("include", [])))


def resolve(root: str | os.PathLike[str], setup: str | None = None, *, detect: bool = True) -> Environment | None:
    """The environment of the repository at `root`: `setup` when given ("none" or "": no
    environment), else recap.toml's [env], else `detect_setup` (when `detect`). The include list
    always comes from recap.toml.

    Raises: ConfigError for a bad recap.toml."""
    root = Path(root)
    declared = read_project_config(root)
    include = declared.include if declared else ()
    if setup is not None:
        return Environment(setup=setup, include=include) if setup.strip() and setup.strip() != "none" else None
    if declared and declared.setup.strip():
        return declared
    guessed = detect_setup(root) if detect else None
    if guessed:
        return Environment(setup=guessed, include=include)
    return Environment(setup="true", include=include) if include else None


def environment_key(env: Environment, root: Path, *, interpreter: str) -> str:
    """Hex key (24 chars) of `env` for the workspace files at `root` built with `interpreter`
    (an absolute path): set-up command, include list, the contents of the defining files."""
    digest = hashlib.sha256()
    digest.update(f"{_KEY_VERSION}\0{env.setup}\0{chr(0).join(env.include)}\0{interpreter}\0".encode())
    for path in [*(root / n for n in DEFINING_FILES), *_requirements(root)]:
        if path.is_file() and not path.is_symlink():
            digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:24]


def base_interpreter() -> str:
    """The interpreter environments are made with: the one recap runs on, without its virtualenv."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def clean_path(path_var: str) -> str:
    """`path_var` without recap's virtualenv and without any other virtualenv's bin directory
    (the user's activated one): what follows the environment's bin on a command's PATH."""
    kept = []
    for entry in path_var.split(os.pathsep):
        real = os.path.realpath(entry) if entry else ""
        if not real or real.startswith(os.path.realpath(sys.prefix) + os.sep):
            continue
        if (Path(real).parent / "pyvenv.cfg").is_file():
            continue
        kept.append(entry)
    return os.pathsep.join(dict.fromkeys(kept))


def command_path(path_var: str) -> str:
    """The PATH of a command in a workspace with an environment."""
    return os.pathsep.join(p for p in (f"{ENV_MOUNT}/bin", clean_path(path_var)) if p)


def bounded_output(text: str) -> str:
    if len(text) <= _MAX_OUTPUT_CHARS:
        return text
    half = _MAX_OUTPUT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


# --- the files a set-up writes into the workspace -------------------------------------------------
def file_states(root: Path) -> dict[str, tuple[int, int]]:
    """workspace-relative path -> (size, mtime_ns) of every file and symlink below `root`, .git aside."""
    states: dict[str, tuple[int, int]] = {}
    for top, dirs, files in os.walk(root):
        if top == str(root):
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            full = os.path.join(top, name)
            st = os.lstat(full)
            states[os.path.relpath(full, root)] = (st.st_size, st.st_mtime_ns)
    return states


def save_overlay(root: Path, before: dict[str, tuple[int, int]], dest: Path) -> list[str]:
    """Copy into `dest` what changed below `root` since `before` (new or changed files and symlinks);
    returns their paths. `__pycache__` folders are left out."""
    changed = [p for p, state in file_states(root).items()
               if before.get(p) != state and "__pycache__" not in Path(p).parts]
    for rel in changed:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target, follow_symlinks=False)
    return sorted(changed)


def _writable_target(root: Path, rel: str) -> Path:
    """Where to write the file `rel` below `root`: its folders made, none of them a symlink that
    leads out of `root`, and a symlink at `rel` itself removed (so the write cannot follow it).

    Raises: PathOutsideWorkspace."""
    parent = PurePosixPath(rel).parent
    for depth in range(1, len(parent.parts) + 1):
        confine(root, str(PurePosixPath(*parent.parts[:depth])))
    folder = confine(root, str(parent)) if parent.parts else root
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / PurePosixPath(rel).name
    if target.is_symlink():
        target.unlink()
    return target


def apply_overlay(source: Path, root: Path) -> None:
    """Copy the overlay at `source` into the workspace at `root` (files replaced, symlinks as links)."""
    if not source.is_dir():
        return
    for top, dirs, files in os.walk(source):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            full = Path(top) / name
            target = _writable_target(root, full.relative_to(source).as_posix())
            if target.is_file():
                target.unlink()
            shutil.copy2(full, target, follow_symlinks=False)


def copy_includes(repo: Path, root: Path, include: tuple[str, ...]) -> list[str]:
    """Copy the files matching each include pattern (glob, repository-relative) from the user's
    checkout `repo` into the workspace `root`; returns the paths copied.

    Raises: ConfigError for a pattern that is absolute or climbs out with `..`."""
    copied: list[str] = []
    base = repo.resolve()
    for pattern in include:
        pure = PurePosixPath(pattern)
        if pure.is_absolute() or ".." in pure.parts or not pattern.strip():
            raise ConfigError(f"include pattern {pattern!r} must be relative to the repository, without '..'")
        for match in sorted(base.glob(pattern)):
            rel = match.relative_to(base).as_posix()
            try:
                source = confine(base, rel)
            except PathOutsideWorkspace:
                log.warning("include %s skipped: it leaves the repository or is inside .git", rel)
                continue
            if not source.is_file():
                continue
            shutil.copyfile(source, _writable_target(root, rel))
            copied.append(rel)
    return copied


# --- the cache ----------------------------------------------------------------------------------
@contextlib.contextmanager
def locked(key: str) -> Iterator[Path]:
    """Hold the build lock of `key`; yields the directory the built environment lives in
    (`cache_dir()/envs/<key>`; complete when it holds `ready`)."""
    envs = cache_dir() / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    with open(envs / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield envs / key
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_ready(env_dir: Path) -> bool:
    return (env_dir / "ready").is_file()


def pip_cache() -> Path:
    path = cache_dir() / "pip"
    path.mkdir(parents=True, exist_ok=True)
    return path


def setup_script(env: Environment, *, interpreter: str) -> str:
    """The bash script the set-up runs: a new virtualenv at ENV_MOUNT, then `env.setup`."""
    return f"{shlex.quote(interpreter)} -m venv {ENV_MOUNT} && {env.setup}"


def setup_variables() -> dict[str, str]:
    """Environment variables of the set-up command besides the commands' usual ones."""
    return {"VIRTUAL_ENV": ENV_MOUNT, "PIP_CACHE_DIR": PIP_CACHE_MOUNT, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1"}
