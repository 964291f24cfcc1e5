"""The error tree of recap, in one place.

    RecapError                      base of every error recap raises on purpose
    ├── ConfigError                 a bad option or combination; the message says how to fix it
    ├── ToolError                   a tool call that cannot run (bad arguments, refused path, ...);
    │                               the agent loop turns it into an error observation
    │   ├── PathOutsideWorkspace    `..`, an absolute path, a symlink leading out of the workspace or
    │   │                           into the sealed `.git`
    │   ├── InvalidPath             a path no file system can hold (NUL byte, lone surrogate, too long)
    │   └── NotRegularFile          a FIFO, socket or device: file tools never open one
    ├── WorkspaceError              the workspace itself failed (creation, a backend problem)
    │   └── CommandTimeout          a command ran past its timeout and its process group was killed
    ├── PolicyError                 the model backend failed (not a malformed completion: that is an
    │                               observation, not an error)
    └── SessionFormatError          a session file that cannot be read or does not validate; names
                                    the file and the line (no line for a file refused as a whole)

Stop reasons of an episode are not errors: see `harness.session.StopReason`.
"""

from __future__ import annotations


class RecapError(Exception):
    """Base class of every error recap raises on purpose."""


class ConfigError(RecapError, ValueError):
    """An invalid configuration value or combination."""


class ToolError(RecapError):
    """A tool call that cannot be carried out; its message is shown to the policy."""


class PathOutsideWorkspace(ToolError):
    """A path that would leave the workspace root."""


class InvalidPath(ToolError):
    """A path no file system can hold: a NUL byte, a lone surrogate, a name or a path too long."""


class NotRegularFile(ToolError):
    """A path that names a FIFO, socket or device (opening one could block forever)."""


class WorkspaceError(RecapError):
    """A workspace backend failure."""


class CommandTimeout(WorkspaceError):
    """A command exceeded its timeout; its whole process group was killed."""


class PolicyError(RecapError):
    """The policy backend (model, server) failed to produce a completion."""


class SessionFormatError(RecapError):
    """A session file that cannot be read, or one of its lines that does not validate.

    The message reads `FILE:LINE: what` (or `FILE: what` for a file refused as a whole: not a
    regular file, too large, unreadable).

    Attributes:
        path: the session file.
        line: 1-based line number of the bad line; None when the file is refused as a whole.
    """

    def __init__(self, message: str, *, path: str, line: int | None) -> None:
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")
        self.path = path
        self.line = line
