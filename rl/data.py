"""Training data: the sessions of a folder, and a resumable cursor over them.

The cursor walks a seeded permutation of the sessions, epoch after epoch; its whole state is
`(epoch, position)`, saved in checkpoints so that a resumed run draws the same batches as an
uninterrupted one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.session import Session, SessionStart, Verdict, read_session


def training_start(session: Session) -> SessionStart:
    """The start state to train on for one logged session.

    An editor session has no verify command and no reference diff of its own; when the user
    accepted (or kept) its change and no later verdict took that back, that change becomes the
    reference diff, so rollouts from its start state are rewarded for reaching what the user
    accepted (`rl.rewards.diff_similarity`). Otherwise the start event as logged.
    """
    start = session.start
    verdicts = [e.verdict for e in session.of_type(Verdict)]
    final = session.final
    if (start.verify is None and start.reference_diff is None and verdicts and verdicts[-1] in ("accepted", "kept")
            and final is not None and final.diff.strip()):
        return start.model_copy(update={"reference_diff": final.diff})
    return start


def load_starts(folder: str | Path) -> list[SessionStart]:
    """The start state to train on (`training_start`) of every `*.jsonl` session below `folder`,
    sorted by file path.

    Raises:
        ConfigError: the folder does not exist or holds no session.
        SessionFormatError: a file that is not a valid session (names file and line).
    """
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"sessions folder not found: {root}")
    starts = [training_start(read_session(p)) for p in sorted(root.rglob("*.jsonl"))]
    if not starts:
        raise ConfigError(f"no session files (*.jsonl) in {root}; make some with `recap tasks make` or `recap sessions mine`")
    return starts


@dataclass
class SessionCursor:
    """Deterministic batches over `size` items: a fresh permutation (seeded by `seed` and the
    epoch) each epoch; `state()`/`from_state()` round-trip it exactly."""

    size: int
    seed: int
    epoch: int = 0
    position: int = 0

    def _order(self) -> list[int]:
        order = list(range(self.size))
        random.Random(f"{self.seed}:{self.epoch}").shuffle(order)
        return order

    def next(self, n: int) -> list[int]:
        """The next `n` indices (wrapping into the next epoch when needed)."""
        out: list[int] = []
        while len(out) < n:
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
            take = min(n - len(out), self.size - self.position)
            out.extend(self._order()[self.position : self.position + take])
            self.position += take
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    @classmethod
    def from_state(cls, state: dict[str, int], *, size: int, seed: int) -> "SessionCursor":
        return cls(size=size, seed=seed, epoch=int(state["epoch"]), position=int(state["position"]))


def split_sessions(
    inputs: list[Path], *, out: Path, held_out: float, seed: int = 0
) -> tuple[list[Path], list[Path]]:
    """Copy session files into `out/train` and `out/held-out` by a seeded shuffle.

    Args:
        inputs: session files or folders (searched for `*.jsonl`).
        held_out: fraction held out, 0 < x < 1 (at least one session on each side).
    Returns:
        (train files, held-out files) as written.
    Raises:
        ConfigError: a bad fraction or fewer than two sessions.
        SessionFormatError: a file that is not a valid session (`harness.session.read_session`).
    """
    import shutil

    if not 0 < held_out < 1:
        raise ConfigError(f"--held-out must be between 0 and 1, got {held_out}")
    # anything but a folder is taken as a session file, so that read_session refuses a FIFO or a device
    files = sorted({f for p in inputs for f in (sorted(Path(p).rglob("*.jsonl")) if Path(p).is_dir() else [p])})
    if len(files) < 2:
        raise ConfigError(f"need at least two sessions to split, found {len(files)}")
    for f in files:
        read_session(f)  # refuse invalid files before copying anything
    random.Random(seed).shuffle(files)
    n_held = min(len(files) - 1, max(1, round(held_out * len(files))))
    written: tuple[list[Path], list[Path]] = ([], [])
    for i, f in enumerate(files):
        side = 1 if i < n_held else 0
        folder = out / ("held-out" if side else "train")
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f.name
        shutil.copyfile(f, target)
        written[side].append(target)
    return written
