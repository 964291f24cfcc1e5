"""One editor session: its state, the agent run in a worker thread, and how its events are shown.

`EditorSession` is plain state owned by the server's event-loop thread. `execute` is the body of the
worker thread: it loads the policy, opens the shadow workspace (the user's files plus unsaved
buffers), runs the agent, reads the proposal, and always closes the workspace. It never touches the
LSP connection; events reach the loop through the `on_event` callback the server gives it.
"""

from __future__ import annotations

import contextlib

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from harness.types import Policy
from lsp_server.proposal import Proposal, build_proposal

logger = logging.getLogger(__name__)

SessionState = Literal["running", "finished", "failed", "cancelled", "accepted", "rejected"]

OBSERVATION_HEAD_CHARS = 2000
"""How much of a tool's output a `recap/event` notification carries."""

_VERBS = {
    "read_file": "reading",
    "list_dir": "listing",
    "glob": "finding",
    "grep": "searching",
    "outline": "outlining",
    "edit_file": "editing",
    "write_file": "editing",
    "delete_file": "deleting",
    "run_command": "running",
    "finish": "finishing",
}
"""Progress verbs of the default tools (`harness.tools.default_registry`); others show their name."""


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass
class EditorSession:
    """A session as the server tracks it (mutated on the event-loop thread only).

    Attributes:
        id: the session id (also the session file's stem and `session_start.session_id`'s meta).
        task: the task as the user gave it; `prompt` is what the agent gets (task plus context).
        repo: the workspace folder the shadow workspace copies.
        buffers: unsaved editor buffers at the start (workspace-relative path -> text).
        adapter_id: the LoRA adapter this session runs with, fixed at start.
        session_path: the session file.
        progress_token: the work-done progress token, when the client supports progress.
        step, tokens, summaries: policy action turns so far, prompt tokens of the latest turn (the
            context size), self-summaries so far.
        proposal: what a finished run proposes.
        accepted: accepted files -> the lines the accepted edit inserted (for the kept signal).
    """

    id: str
    task: str
    prompt: str
    repo: Path
    buffers: dict[str, str]
    session_path: Path
    adapter_id: str | None = None
    adapter_path: Path | None = None
    progress_token: str | int | None = None
    state: SessionState = "running"
    step: int = 0
    tokens: int = 0
    summaries: int = 0
    message: str | None = None
    proposal: Proposal | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    idle: threading.Event = field(default_factory=_set_event)
    """Clear while a worker thread runs this session (set again once its workspace is closed)."""
    log: Any = None
    accepted: dict[str, list[str]] = field(default_factory=dict)
    workspace: Any = None
    """The shadow workspace while the worker runs (None before and after)."""

    def stop(self) -> None:
        """Cancel the run from any thread: the agent stops before its next step, and a command
        running now is killed (its workspace's `interrupt`)."""
        self.cancel.set()
        workspace = self.workspace
        if workspace is not None:
            workspace.interrupt()

    def status(self) -> dict[str, Any]:
        """`SessionStatus` of `docs/lsp-protocol.md`."""
        out: dict[str, Any] = {
            "session": self.id,
            "task": self.task,
            "state": self.state,
            "step": self.step,
            "tokens": self.tokens,
            "summaries": self.summaries,
        }
        if self.message:
            out["message"] = self.message
        if self.adapter_id:
            out["adapter"] = self.adapter_id
        return out

    def observe(self, event: Any) -> str | None:
        """Update the counters from an agent event; return the progress line for it, if any."""
        if event.type == "policy_turn":
            self.tokens = event.prompt_tokens
            if event.kind == "action":
                self.step += 1
                return f"step {self.step}: " + (", ".join(_describe_call(c.name, c.arguments) for c in event.tool_calls) or "thinking")
            return None
        if event.type == "summary":
            self.summaries = event.index
            self.tokens = event.tokens_after
            return f"summarized {_kilo(event.tokens_before)} -> {_kilo(event.tokens_after)} tokens"
        if event.type == "prune":
            self.tokens = event.tokens_after
            return f"pruned {len(event.obs_ids)} observations: {_kilo(event.tokens_before)} -> {_kilo(event.tokens_after)} tokens"
        return None


def _kilo(tokens: int) -> str:
    """12000 -> "12k", 900 -> "0.9k"."""
    text = f"{tokens / 1000:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "k"


def _describe_call(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments)
    except ValueError:
        args = {}
    args = args if isinstance(args, dict) else {}
    verb = _VERBS.get(name, name)
    target = args.get("path") or args.get("command") or args.get("pattern") or args.get("query")
    if name == "run_command" and isinstance(target, str):
        return f"running `{target[:80]}`"
    return f"{verb} {target}" if isinstance(target, str) else verb


def event_payload(session_id: str, event: Any) -> dict[str, Any]:
    """The `recap/event` notification for a session event (big fields left out, outputs cut)."""
    data = event.model_dump(mode="json")
    if event.type == "session_start":
        data = {k: data[k] for k in ("seq", "ts", "type", "session_id", "task", "model", "adapter_id", "repo", "sandbox")}
    elif event.type == "policy_turn":
        for key in ("prompt_ids", "completion_ids", "logprobs"):
            data.pop(key, None)
    elif event.type == "observation":
        output = data["output"]
        data["output"] = output[:OBSERVATION_HEAD_CHARS]
        data["truncated"] = len(output) > OBSERVATION_HEAD_CHARS
    return {"session": session_id, **data}


@dataclass(frozen=True)
class RunOutcome:
    """What the worker thread hands back: the final state, a message, the proposal, and the open
    session log (None when the run never started: no empty session file is left behind)."""

    state: SessionState
    message: str | None
    proposal: Proposal | None
    log: Any = None


def execute(
    session: EditorSession,
    *,
    policy: Callable[[], Policy],
    open_workspace: Callable[[], Any],
    config: Any,
    open_log: Callable[[], Any],
    on_event: Callable[[Any], None],
    model_spec: str,
    on_text: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run the agent for `session` (in a worker thread). Never raises: failures become the
    `failed` state with the error text. The workspace is closed before returning, whatever happens.
    `on_text` receives the reply text as it streams, for policies that stream (`openai:`).
    """
    from harness.agent import Agent
    from harness.errors import RecapError

    workspace = log = None
    session.idle.clear()
    try:
        loaded = policy()
        if session.cancel.is_set():
            return RunOutcome("cancelled", "cancelled before the start", None)
        workspace = session.workspace = open_workspace()
        log = open_log()
        agent = Agent(policy=loaded, workspace=workspace, config=config, log=log, on_event=on_event, cancel=session.cancel)
        streams = on_text is not None and hasattr(loaded, "streaming")
        with loaded.streaming(on_text) if streams else contextlib.nullcontext():
            result = agent.run(
                session.prompt,
                origin=workspace.origin,
                source="lsp",
                adapter_id=session.adapter_id,
                session_id=session.id,
                meta={"lsp_session": session.id, "model_spec": model_spec},
            )
        if result.stop_reason == "cancelled" or session.cancel.is_set():
            return RunOutcome("cancelled", None, None, log)
        if result.stop_reason == "error":
            return RunOutcome("failed", result.message or "the agent stopped with an error", None, log)
        proposal = build_proposal(workspace, result.diff)
        message = result.stop_reason if result.stop_reason != "finish" else (result.message or None)
        if proposal.skipped:
            note = "not offered: " + ", ".join(proposal.skipped)
            message = f"{message}; {note}" if message else note
        return RunOutcome("finished", message, proposal, log)
    except (RecapError, OSError, ValueError) as exc:
        logger.warning("session %s failed: %s", session.id, exc)
        return RunOutcome("failed", f"{type(exc).__name__}: {exc}", None, log)
    except Exception as exc:  # a bug must not kill the server; report it as the session's failure
        logger.exception("session %s crashed", session.id)
        return RunOutcome("failed", f"internal error: {type(exc).__name__}: {exc}", None, log)
    finally:
        session.workspace = None
        if workspace is not None:
            workspace.close()
        session.idle.set()
