"""The offline base image of the Docker backend: debootstrap + `docker import`.

No image registry is reachable, so the image is built from Debian packages:

    debootstrap --variant=minbase --include=python3,git,... bookworm DIR MIRROR
    (add the non-root user `recap`, uid/gid 1000, home /home/recap, and /workspace)
    tar -C DIR -c . | docker import - NAME

A project layers its own set-up on top with an ordinary Dockerfile `FROM recap-base`.
Building needs root (debootstrap chroots) and takes about a minute; it is skipped when an image of
the same recipe (suite, packages, `RECIPE_VERSION`: the label `recap.recipe`) exists, unless
`force=True`; an image of an older recipe is rebuilt.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.errors import ConfigError, WorkspaceError

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "recap-base"
DEFAULT_SUITE = "bookworm"
DEFAULT_PACKAGES = ("python3", "python-is-python3", "python3-venv", "python3-pip", "python3-pytest", "git", "ripgrep",
                    "ca-certificates")
FALLBACK_MIRROR = "http://deb.debian.org/debian"
USER_UID = 1000
USER_NAME = "recap"
WORKDIR = "/workspace"
TEMP_PREFIX = "recap-rootfs-"
RECIPE_VERSION = 2
"""Bump when the image's contents change other than by `suite` or `packages` (e.g. `_add_user`)."""
RECIPE_LABEL = "recap.recipe"


def recipe_of(suite: str, packages: Sequence[str]) -> str:
    """The recipe key of an image: what `build_base_image` would put in it."""
    text = f"{RECIPE_VERSION}\n{suite}\n" + "\n".join(sorted(packages))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ImageBuild:
    """Result of `build_base_image`.

    Attributes:
        name: the image tag.
        image_id: the Docker image id (`sha256:...`).
        built: False when an existing image was kept.
        duration_s: wall-clock seconds.
    """

    name: str
    image_id: str
    built: bool
    duration_s: float


def default_mirror(*, sources_dir: str = "/etc/apt") -> str:
    """The first plain Debian mirror URI of this machine's apt sources, else deb.debian.org.

    Reads `sources.list` (one-line format) and `sources.list.d/*.sources` (deb822); security and
    update suites are skipped.
    """
    root = Path(sources_dir)
    candidates: list[str] = []
    one_line = root / "sources.list"
    if one_line.is_file():
        for line in one_line.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb":
                uri = next((p for p in parts[1:] if p.startswith(("http://", "https://", "file:"))), None)
                if uri:
                    candidates.append(uri)
    for deb822 in sorted((root / "sources.list.d").glob("*.sources")):
        for line in deb822.read_text(errors="replace").splitlines():
            if line.startswith("URIs:"):
                candidates.extend(line.split()[1:])
    for uri in candidates:
        if "security" not in uri and uri.rstrip("/").endswith("debian"):
            return uri
    return FALLBACK_MIRROR


def docker_client() -> Any:
    """A `docker.DockerClient` from the environment.

    Raises:
        WorkspaceError: no daemon answers (with how to start one).
    """
    import docker  # lazy: heavy and optional at import

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # docker raises several unrelated types here
        raise WorkspaceError(
            f"cannot reach the Docker daemon ({exc}); start it with `dockerd >/tmp/dockerd.log 2>&1 &`"
        ) from None
    return client


def image_exists(client: Any, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


def _add_user(rootfs: Path) -> None:
    """Add the non-root user (uid/gid 1000) and /workspace without chrooting."""
    with (rootfs / "etc/passwd").open("a") as fh:
        fh.write(f"{USER_NAME}:x:{USER_UID}:{USER_UID}:recap:/home/{USER_NAME}:/bin/bash\n")
    with (rootfs / "etc/group").open("a") as fh:
        fh.write(f"{USER_NAME}:x:{USER_UID}:\n")
    shadow = rootfs / "etc/shadow"
    if shadow.exists():
        with shadow.open("a") as fh:
            fh.write(f"{USER_NAME}:!:19000:0:99999:7:::\n")
    for directory in (rootfs / "home" / USER_NAME, rootfs / WORKDIR.lstrip("/")):
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, USER_UID, USER_UID)
    # The workspace is bind-mounted from the host and may belong to another uid: let git read it.
    (rootfs / "etc/gitconfig").write_text("[safe]\n\tdirectory = *\n")
    # Keep the image small: apt caches and docs are not needed at run time.
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        target = rootfs / sub
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                elif child.name != "lock":
                    child.unlink(missing_ok=True)


def build_base_image(
    *,
    name: str = DEFAULT_IMAGE,
    mirror: str | None = None,
    suite: str = DEFAULT_SUITE,
    packages: Sequence[str] = DEFAULT_PACKAGES,
    force: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> ImageBuild:
    """Build (or keep) the base image `name`.

    Args:
        name: image tag to create.
        mirror: Debian mirror URL; default: this machine's apt sources (`default_mirror`).
        suite: Debian suite for debootstrap.
        packages: extra packages for `--include`.
        force: rebuild even when an image of the same recipe exists.
        on_step: called with a short description before each stage (progress display).
    Returns:
        `ImageBuild`.
    Raises:
        WorkspaceError: no Docker daemon, debootstrap missing or failing (its output's tail is
            in the message), not running as root.
    """
    import time

    start = time.monotonic()
    step = on_step or (lambda text: log.info("%s", text))
    if not name or any(c.isspace() for c in name):
        raise ConfigError(f"invalid image name {name!r}")
    client = docker_client()
    recipe = recipe_of(suite, packages)
    if image_exists(client, name) and not force:
        image = client.images.get(name)
        if (image.labels or {}).get(RECIPE_LABEL) == recipe:
            return ImageBuild(name=name, image_id=image.id, built=False, duration_s=time.monotonic() - start)
        step(f"{name} is of an older recipe: rebuilding")
    if shutil.which("debootstrap") is None:
        raise WorkspaceError("debootstrap is not installed (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise WorkspaceError("building the base image needs root (debootstrap chroots); run it with sudo")
    mirror = mirror or default_mirror()
    rootfs = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    tarball = rootfs.with_suffix(".tar")
    try:
        step(f"debootstrap {suite} from {mirror}")
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(rootfs), mirror],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise WorkspaceError(f"debootstrap failed (exit {proc.returncode}):\n{tail}")
        _add_user(rootfs)
        step(f"docker import {name}")
        subprocess.run(["tar", "-C", str(rootfs), "-c", "-f", str(tarball), "."], check=True)
        repository, _, tag = name.partition(":")
        client.api.import_image_from_file(
            str(tarball),
            repository=repository,
            tag=tag or "latest",
            changes=[f"USER {USER_NAME}", f"WORKDIR {WORKDIR}", "ENV LANG=C.UTF-8 HOME=/home/recap",
                     f"LABEL {RECIPE_LABEL}={recipe}"],
        )
        image = client.images.get(name)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
        tarball.unlink(missing_ok=True)
    return ImageBuild(name=name, image_id=image.id, built=True, duration_s=time.monotonic() - start)
