"""Session files: the append-only event log of one episode, as JSON Lines.

Every `recap run`, editor session, replay and RL rollout writes one. Each line is one event, a
frozen pydantic record with `type`, `seq` (0-based, consecutive) and `ts` (Unix seconds). The
first event is always `session_start` carrying `schema_version`. The log is never rewritten: a
self-summary or a prune is itself an event saying what it replaced, so the model's context at any
turn is a pure function of the events before it (`harness.context`), and the raw history stays
for rewards and replay.

Reading (`read_session`) validates every line. A torn final line (a crash mid-write) is dropped and
reported through `Session.torn`; any other bad line raises `SessionFormatError` naming the line.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from harness.errors import SessionFormatError

SCHEMA_VERSION = 1

StopReason = Literal["finish", "max_steps", "loop_guard", "context_exhausted", "cancelled", "error"]
"""Why an episode ended: the policy called `finish`; the step limit; the same call repeated
`loop_guard` times in a row; no prompt fits the window any more; cancelled by the user; an
unexpected exception (its text is in `Final.message`)."""

ErrorKind = Literal["malformed", "unknown_tool", "bad_arguments", "tool_error", "no_call", "not_offered"]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    seq: int = Field(ge=0)
    ts: float


class SessionStart(_Event):
    """Everything needed to rebuild the start state and re-run the episode."""

    type: Literal["session_start"] = "session_start"
    schema_version: int
    session_id: str
    source: Literal["cli", "lsp", "mined", "task", "replay", "rollout"] = "cli"
    repo: str
    base_commit: str | None = None
    base_diff: str = ""
    """Unified diff from `base_commit` to the state the agent started from (staged, unstaged and
    untracked changes); binary-safe git format."""
    buffers: dict[str, str] = Field(default_factory=dict)
    """Unsaved editor buffers (workspace-relative path -> text), applied after `base_diff`."""
    task: str
    model: str
    adapter_id: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    """The resolved configuration of the run (agent, context, backend sections)."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    system_prompt: str = ""
    sandbox: str = ""
    """How commands were isolated, e.g. "bwrap: no network" or "docker: network_mode=none"."""
    verify: str | None = None
    """Shell command whose exit status scores the outcome (e.g. the failing tests)."""
    reference_diff: str | None = None
    """A known-good diff for the task (a mined commit's diff), when there is one."""
    test_patch: str | None = None
    """Tests the task's fix adds or changes (git diff): applied to the workspace just before
    `verify` runs, never shown to the agent (the SWE-bench convention)."""
    env: dict[str, Any] | None = None
    """The project environment (`harness.workspace.Environment` as a dict: setup, include, key,
    output) that commands and verify ran in; None: the host toolchain."""
    meta: dict[str, Any] = Field(default_factory=dict)


class UserMessage(_Event):
    """A message from the user (or the harness speaking for it) added to the context."""

    type: Literal["user_message"] = "user_message"
    content: str


class ToolCallRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    name: str
    arguments: str


class PolicyTurn(_Event):
    """One completion of the policy, with the exact tokens for training."""

    type: Literal["policy_turn"] = "policy_turn"
    turn: int = Field(ge=0)
    kind: Literal["action", "summary"] = "action"
    segment: int = Field(0, ge=0)
    """Trajectory segment: 0 before the first summary; a summary turn closes its segment."""
    text: str
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    parse_errors: list[str] = Field(default_factory=list)
    offered_tools: list[str] = Field(default_factory=list)
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    constrained: bool = False
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    encoded_tokens: int = 0
    duration_s: float = 0.0


class Observation(_Event):
    """The result of one tool call (or of a malformed one), as shown to the policy."""

    type: Literal["observation"] = "observation"
    turn: int = Field(ge=0)
    obs_id: int = Field(ge=1)
    """Shown in the observation header; what `prune(ids)` refers to."""
    call_id: str
    name: str
    arguments: str
    output: str
    is_error: bool = False
    error_kind: ErrorKind | None = None
    duration_s: float = 0.0


class Summary(_Event):
    """A self-summary: from here on it replaces every event with `seq <= replaces_through_seq`
    (except the system prompt and the task)."""

    type: Literal["summary"] = "summary"
    index: int = Field(ge=1)
    turn: int
    text: str
    replaces_through_seq: int
    tokens_before: int
    tokens_after: int
    truncated: bool = False


class Prune(_Event):
    """Observations dropped from the context by the policy (Context-1); each leaves a one-line stub."""

    type: Literal["prune"] = "prune"
    turn: int
    obs_ids: list[int]
    tokens_before: int
    tokens_after: int


class Final(_Event):
    type: Literal["final"] = "final"
    stop_reason: StopReason
    message: str | None = None
    diff: str
    steps: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    encoded_tokens: int = 0
    summaries: int = 0
    duration_s: float = 0.0


class Verdict(_Event):
    """The user's decision on the proposed change (editor sessions)."""

    type: Literal["verdict"] = "verdict"
    verdict: Literal["accepted", "rejected", "kept", "reverted"]
    files: list[str] | None = None
    reason: str | None = None


class Score(_Event):
    """Outcome scoring of the final workspace (verify command, reference diff, rewards)."""

    type: Literal["score"] = "score"
    verify_passed: bool | None = None
    verify_exit_code: int | None = None
    tests_passed: int | None = None
    tests_failed: int | None = None
    verify_output: str = ""
    diff_similarity: float | None = None
    rewards: dict[str, float | None] = Field(default_factory=dict)


Event = Annotated[
    Union[SessionStart, UserMessage, PolicyTurn, Observation, Summary, Prune, Final, Verdict, Score],
    Field(discriminator="type"),
]
_EVENT = TypeAdapter(Event)


def default_sessions_dir() -> Path:
    """Where sessions go unless configured: `$XDG_DATA_HOME/recap/sessions`, else
    `~/.local/share/recap/sessions`. Not created here."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "recap" / "sessions"


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]


class SessionWriter:
    """Appends events to a session file, flushing after each line.

    Use `emit(EventClass, **fields)`: `seq` and `ts` are filled in. Events are also kept in
    `events` so that the context can be rebuilt without re-reading the file.
    `path=None` keeps the log in memory only (RL rollouts that are not saved).
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None
        self.events: list[Any] = []
        self._fh: IO[str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")

    def emit(self, cls: type[_Event], **fields: Any) -> Any:
        event = cls(seq=len(self.events), ts=time.time(), **fields)
        self.events.append(event)
        if self._fh is not None:
            self._fh.write(event.model_dump_json() + "\n")
            self._fh.flush()
        return event

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


@dataclass(frozen=True)
class Session:
    """A session read from disk.

    Attributes:
        path: the file.
        events: validated events in order.
        torn: True when the last line was cut mid-write and was dropped.
    """

    path: Path
    events: tuple[Any, ...]
    torn: bool = False

    @property
    def start(self) -> SessionStart:
        return self.events[0]

    def of_type(self, cls: type[_Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    @property
    def final(self) -> Final | None:
        finals = self.of_type(Final)
        return finals[-1] if finals else None


def read_session(path: str | os.PathLike[str]) -> Session:
    """Read and validate a session file.

    Raises:
        SessionFormatError: empty file, a first line that is not a `session_start` of this schema
            version, or a bad line that is not the (torn) last one. The error names the line.
        FileNotFoundError: no such file.
    """
    p = Path(path)
    raw = p.read_text(encoding="utf-8", errors="replace")
    lines = raw.split("\n")
    complete_tail = raw.endswith("\n")
    if lines and lines[-1] == "":
        lines.pop()
    events: list[Any] = []
    torn = False
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        try:
            data = json.loads(line)
        except ValueError as exc:
            if last and not complete_tail:
                torn = True
                break
            raise SessionFormatError(f"not valid JSON ({exc})", path=str(p), line=number) from None
        if number == 1:
            version = data.get("schema_version") if isinstance(data, dict) else None
            if not isinstance(data, dict) or data.get("type") != "session_start":
                raise SessionFormatError("first line must be a session_start event", path=str(p), line=1)
            if version != SCHEMA_VERSION:
                raise SessionFormatError(
                    f"schema_version {version!r} is not supported (this recap reads version {SCHEMA_VERSION})",
                    path=str(p),
                    line=1,
                )
        try:
            events.append(_EVENT.validate_python(data))
        except ValidationError as exc:
            if last and not complete_tail:
                torn = True
                break
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            raise SessionFormatError(f"invalid event: {where}: {first['msg']}", path=str(p), line=number) from None
    if not events:
        what = "its only line was cut mid-write (torn)" if torn else "empty session file"
        raise SessionFormatError(what, path=str(p), line=1)
    return Session(path=p, events=tuple(events), torn=torn)
