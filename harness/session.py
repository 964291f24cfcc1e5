"""Session files: the append-only event log of one episode, as JSON Lines.

Every `recap run`, editor session, replay and RL rollout writes one. Each line is one event, a
frozen pydantic record with `type`, `seq` (0-based, consecutive) and `ts` (Unix seconds). The
first event is always `session_start` carrying `schema_version`. The log is never rewritten: a
self-summary or a prune is itself an event saying what it replaced, so the model's context at any
turn is a pure function of the events before it (`harness.context`), and the raw history stays
for rewards and replay.

Reading (`read_session`) validates every line. A torn final line (a crash mid-write) is dropped and
reported through `Session.torn`; any other bad line raises `SessionFormatError` naming the line.

Threat model. A session file is untrusted input: it may come from someone else (a shared session,
a training set), and `recap session show`, `recap replay`, `recap train`/`eval` and
`recap tasks split` read it. `read_session` is the one reader they all use, and it promises:

- it never blocks and never reads without bound: anything but a regular file (a FIFO, a device
  such as /dev/zero, a socket, a directory) is refused from `stat` without being opened, and the
  open is non-blocking in case the path is swapped meanwhile; lines are read one at a time, each
  at most `JsonlLimits.max_line_bytes`, the file at most `max_file_bytes` (`harness.jsonl`);
- it never crashes on content: bad JSON, nesting past `max_depth` (no RecursionError), an event
  that does not validate, a `seq` gap or duplicate all raise `SessionFormatError` naming FILE:LINE,
  which every command prints as `error: ...` (exit status 2);
- what it returns are validated, typed events: strings, numbers and the free-form `config`,
  `meta`, `tools` dicts (bounded in depth), nothing executable.

What the file is trusted for is only the data of an episode: which repository and commit to start
from, the diff and buffers to apply, the task, the tool calls, the verify command. Consumers must
treat those fields as untrusted too: the repository is only read (`shadow_backend.git_state`), the
diff and buffers are applied inside the new workspace and cannot leave it (`confine`, `git apply`),
tool calls and the verify command run only inside the workspace sandbox, and the recorded `model`
and `adapter_id` are shown, never loaded (the policy to run is always named by the user). See
`shadow_backend.replay` for replay's side of this.
"""

from __future__ import annotations

import os
import time
from contextlib import closing
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from harness.errors import SessionFormatError
from harness.jsonl import JsonLine, JsonlLimits, read_jsonl

SCHEMA_VERSION = 1

StopReason = Literal["finish", "max_steps", "loop_guard", "context_exhausted", "cancelled", "error"]
"""Why an episode ended: the policy called `finish`; the step limit; a cycle of calls that kept
repeating after a warning (`harness.agent`, the loop guard); no prompt fits the window any more; cancelled by the user; an
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
    """Absolute path of the repository the episode started from (read, never written)."""
    base_commit: str | None = Field(None, pattern=r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
    """Full object id (SHA-1 or SHA-256, lowercase hex) of the start commit; never a revision
    expression or anything git could take for an option."""
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

    @field_validator("repo")
    @classmethod
    def _absolute_repo(cls, value: str) -> str:
        if "\0" in value or not os.path.isabs(value):
            raise ValueError("must be an absolute path without NUL bytes")
        return value

    @field_validator("buffers")
    @classmethod
    def _writable_buffers(cls, value: dict[str, str]) -> dict[str, str]:
        for path, text in value.items():
            if "\0" in path or not _encodable(path) or not _encodable(text):
                raise ValueError(f"buffer {path[:80]!r}: a path with a NUL byte, or text that is not UTF-8")
        return value

    @field_validator("base_diff")
    @classmethod
    def _diff_bytes(cls, value: str) -> str:
        if not _encodable(value, "surrogateescape"):
            raise ValueError("not a diff: holds characters that are not UTF-8 (lone surrogates)")
        return value


def _encodable(text: str, errors: str = "strict") -> bool:
    """Whether `text` encodes as UTF-8 (with `errors`); lone surrogates from JSON escapes do not."""
    try:
        text.encode("utf-8", errors)
    except UnicodeEncodeError:
        return False
    return True


class UserMessage(_Event):
    """A message from the user (or the harness speaking for it) added to the context."""

    type: Literal["user_message"] = "user_message"
    content: str


class ProjectRules(_Event):
    """The repository's rules files (AGENTS.md and the like, `harness.rules`), as pinned after the
    system prompt in every prompt of the episode; summaries never replace them."""

    type: Literal["project_rules"] = "project_rules"
    text: str
    """The pinned block exactly as the model sees it (cut, with a note saying so, when too long)."""
    files: list[str] = Field(default_factory=list)
    """Files whose text is pinned, in order."""
    listed: list[str] = Field(default_factory=list)
    """Scoped rules files named in the block but not pinned."""
    skipped: list[str] = Field(default_factory=list)
    """"path: reason" for files that were found but not loaded (refused, binary, duplicate)."""
    chars: int = 0
    """Characters of the block had nothing been cut."""
    truncated: bool = False
    tokens: int = 0
    """Tokens the pinned block takes in the policy's tokenizer."""


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
    tool_call_format: str | None = None
    """How the calls were written (`harness.types.Completion.tool_call_format`)."""


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
    rejected: int = Field(0, ge=0)
    """Summary replies rejected as unusable (empty, or only tool-call markup) before this one."""
    fallback: Literal["mask"] | None = None
    """Set when no reply was usable and the harness wrote the summary itself: "mask" is the
    calls made with their outputs masked (observation masking), after the earlier summary."""


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
    Union[SessionStart, ProjectRules, UserMessage, PolicyTurn, Observation, Summary, Prune, Final, Verdict, Score],
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


def _check_first(data: Any, path: str) -> None:
    if not isinstance(data, dict) or data.get("type") != "session_start":
        raise SessionFormatError("first line must be a session_start event", path=path, line=1)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SessionFormatError(
            f"schema_version {version!r} is not supported (this recap reads version {SCHEMA_VERSION})",
            path=path, line=1,
        )


def _event(line: JsonLine, path: str) -> Any | None:
    """The validated event of one line; None when the line is a tear (no newline, and it does not
    parse or validate). Raises SessionFormatError for any other bad line."""
    if line.torn:
        return None
    if line.number == 1:
        _check_first(line.value, path)
    try:
        return _EVENT.validate_python(line.value)
    except ValidationError as exc:
        if not line.complete:
            return None
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise SessionFormatError(f"invalid event: {where}: {first['msg']}", path=path, line=line.number) from None


def read_session(path: str | os.PathLike[str], *, limits: JsonlLimits | None = None) -> Session:
    """Read and validate a session file, line by line within `limits` (`harness.jsonl`; default
    `JsonlLimits()`: 16 MiB a line, 512 MiB a file, nesting 64 deep).

    Every line must be one JSON event; the first a `session_start` of this schema version; `seq`
    must count 0, 1, 2... A last line without its newline that does not parse or validate is a
    tear (a crash mid-write): the events before it are returned with `torn=True`.

    Raises:
        SessionFormatError (message `FILE:LINE: what`, or `FILE: what` for the file as a whole):
            not a regular file (directory, FIFO, device, socket: never opened, so never blocks);
            cannot be opened or read (missing, permissions); larger than `max_file_bytes`; a line
            longer than `max_line_bytes`; not valid JSON; nested deeper than `max_depth`; an
            invalid event; a `seq` gap or duplicate ("expected seq N, found M"); empty.
    """
    name = os.fspath(path)
    events: list[Any] = []
    torn = False
    with closing(read_jsonl(name, limits=limits)) as lines:
        for line in lines:
            event = _event(line, name)
            if event is None:
                torn = True
                break
            if event.seq != len(events):
                raise SessionFormatError(f"expected seq {len(events)}, found {event.seq}", path=name, line=line.number)
            events.append(event)
    if not events:
        what = "its only line was cut mid-write (torn)" if torn else "empty session file"
        raise SessionFormatError(what, path=name, line=1)
    return Session(path=Path(name), events=tuple(events), torn=torn)
