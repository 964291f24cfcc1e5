"""The real-time loop's hand-off: find the newest LoRA adapter that `recap train` wrote.

An adapter is a subfolder of the configured `adapterDir` holding `adapter_config.json` (the layout
`peft`'s `save_pretrained` writes). The newest is the one whose files were modified last; its folder
name is its id. The server looks once per new session, so a session never changes adapter midway.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter folder: `id` (folder name), `path`, `mtime_ns` (newest file in it)."""

    id: str
    path: Path
    mtime_ns: int


def newest_adapter(folder: Path | None) -> Adapter | None:
    """The most recently written adapter under `folder`, or None (no folder, none there yet).

    Ties on the modification time go to the greater folder name, so the choice is deterministic.
    """
    if folder is None or not folder.is_dir():
        return None
    found: list[Adapter] = []
    for child in folder.iterdir():
        if not (child / "adapter_config.json").is_file():
            continue
        mtime = max(f.stat().st_mtime_ns for f in child.iterdir() if f.is_file())
        found.append(Adapter(id=child.name, path=child, mtime_ns=mtime))
    return max(found, key=lambda a: (a.mtime_ns, a.id), default=None)
