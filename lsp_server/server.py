"""`RecapServer`: the agent inside any LSP editor (pygls 2). The wire contract is `docs/lsp-protocol.md`.

One server object per client connection holds everything: the configuration, the open documents
(pygls' workspace), the sessions and the shared policies. The handlers (`lsp_server.handlers`) are
thin: they validate the arguments (`lsp_server.options`), call a method here, and convert back. A run executes in a worker
thread (`lsp_server.runs.execute`); its events come back to the event-loop thread with
`loop.call_soon_threadsafe` and go out as work-done progress and `recap/event` notifications.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cattrs import ClassValidationError, transform_error
from lsprotocol import types
from pygls.exceptions import (JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest,
                              JsonRpcServerNotInitialized)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import from_fs_path, to_fs_path

from lsp_server import edits
from lsp_server.adapters import newest_adapter
from lsp_server.framing import DEFAULT_MAX_MESSAGE_BYTES, CheckedReader, FrameDecoder
from lsp_server.options import RunParams, ServerOptions
from lsp_server.policies import PolicyCache
from lsp_server.runs import EditorSession, event_payload, execute

logger = logging.getLogger(__name__)

COMMANDS = ("recap.run", "recap.cancel", "recap.accept", "recap.reject", "recap.status", "recap.proposal")
EVENT_NOTIFICATION = "recap/event"
CANCEL_WAIT_S = 10.0
"""How long `recap.cancel` waits for the run to stop before answering."""
CONFIGURATION_WAIT_S = 5.0
"""How long a run waits for the client's first `workspace/configuration` answer."""
MAX_MESSAGE_BYTES_ENV = "RECAP_LSP_MAX_MESSAGE_BYTES"
"""Environment variable overriding the largest message body the server reads (bytes)."""


EXECUTE_PARAMS: ContextVar[types.ExecuteCommandParams | None] = ContextVar("recap_execute_params", default=None)
"""The `workspace/executeCommand` params of the request being handled. pygls handles each message in
its own context and an async handler's task copies it, so each command sees its own request."""


@dataclass(frozen=True)
class _Unreadable:
    """A message pygls cannot convert (e.g. an array as params of `workspace/executeCommand`): a
    request (`id` set) gets `error` as its response, anything else is dropped with a log line."""

    id: int | str | None
    error: JsonRpcException


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, dict) else getattr(message, name, None)


def _is_id(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _request_id(message: Any) -> int | str | None:
    """The id to answer `message` (a dict or a converted message) with: set for a request (a
    method and an integer or string id), None when there is nothing to answer."""
    msg_id = _field(message, "id")
    return msg_id if isinstance(_field(message, "method"), str) and _is_id(msg_id) else None


class RecapProtocol(LanguageServerProtocol):
    """pygls' protocol with the LSP lifecycle rules and answers for what pygls leaves unanswered.

    - A request before `initialize` gets ServerNotInitialized (-32002); a notification before it
      is dropped, except `exit`. A second `initialize`, or a request after `shutdown`, gets
      InvalidRequest (-32600).
    - `exit` sets `exit_code`: 0 after `shutdown`, else 1 (`RecapServer.start_io` exits with it).
    - A request whose params pygls cannot convert gets InvalidParams naming the bad field, instead
      of no response; a JSON object that is not a JSON-RPC 2.0 message gets InvalidRequest when it
      has a usable id, else it is dropped with a logged reason.
    - Sets `EXECUTE_PARAMS`, so that `recap.run` can use the client's `workDoneToken` (pygls passes
      a command handler only the arguments).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initialize_seen = False
        self.exit_code: int | None = None  # set by `exit`

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            detail = exc.message
            if not isinstance(data.get("params", {}), dict):
                detail = f"params must be an object, got {type(data['params']).__name__}"
            elif isinstance(exc.__cause__, ClassValidationError):
                detail = "; ".join(transform_error(exc.__cause__))
            return _Unreadable(_request_id(data), type(exc)(f"{data.get('method') or '(no method)'}: {detail}"))

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Unreadable):
            self._refuse(message.id, message.error)
            return
        method, msg_id = _field(message, "method"), _field(message, "id")
        if isinstance(message, dict) or message.jsonrpc != self.VERSION or not (msg_id is None or _is_id(msg_id)):
            self._refuse(_request_id(message), JsonRpcInvalidRequest(
                f"{method or '(no method)'}: not JSON-RPC 2.0 (jsonrpc \"2.0\", an integer or string id)"))
        elif method == types.EXIT:
            super().handle_message(message)
        elif not self.initialize_seen and method != types.INITIALIZE:
            if msg_id is None:  # a notification
                logger.info("dropped %s: the server is not initialized yet", method)
            else:
                self._refuse(_request_id(message), JsonRpcServerNotInitialized(
                    f"{method}: the server is not initialized; send initialize first"))
        elif method == types.INITIALIZE and self.initialize_seen:
            self._refuse(_request_id(message), JsonRpcInvalidRequest("initialize: the server is already initialized"))
        elif self._shutdown and method is not None:
            self._refuse(_request_id(message), JsonRpcInvalidRequest(
                f"{method}: the server is shut down; only exit is accepted"))
        else:
            if method == types.INITIALIZE:
                self.initialize_seen = True
            super().handle_message(message)

    def _refuse(self, msg_id: int | str | None, error: JsonRpcException) -> None:
        """Answer request `msg_id` with `error`; without an id (nothing to answer), log and drop."""
        if msg_id is None:
            logger.warning("dropped a message: %s", error.message[:300])
        else:
            self._send_response(msg_id, None, error.to_response_error())

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any):
        self.exit_code = 0 if self._shutdown else 1  # the LSP spec's exit codes
        return (yield from super().lsp_exit(*args))

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams):
        EXECUTE_PARAMS.set(params)
        return (yield from super().lsp_workspace__execute_command(params))


def invalid(message: str) -> JsonRpcInvalidParams:
    return JsonRpcInvalidParams(message)


def max_message_bytes_from_env() -> int:
    """The message size cap: `$RECAP_LSP_MAX_MESSAGE_BYTES` (a positive number of bytes) when set
    and valid, else `DEFAULT_MAX_MESSAGE_BYTES`; an invalid value is logged and ignored."""
    raw = os.environ.get(MAX_MESSAGE_BYTES_ENV)
    if raw is None:
        return DEFAULT_MAX_MESSAGE_BYTES
    try:
        if int(raw) > 0:
            return int(raw)
    except ValueError:
        pass
    logger.error("%s must be a positive number of bytes, got %r; using %d",
                 MAX_MESSAGE_BYTES_ENV, raw[:40], DEFAULT_MAX_MESSAGE_BYTES)
    return DEFAULT_MAX_MESSAGE_BYTES


class RecapServer(LanguageServer):
    """The recap language server; per-client state lives here.

    `max_message_bytes`: the largest message body read (bytes; a larger frame is dropped, see
    `lsp_server.framing`); None reads `max_message_bytes_from_env()`.
    """

    protocol: RecapProtocol

    def __init__(self, max_message_bytes: int | None = None) -> None:
        from importlib.metadata import version

        super().__init__("recap", version("recap"), protocol_cls=RecapProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.max_message_bytes = max_message_bytes_from_env() if max_message_bytes is None else max_message_bytes
        self.options = ServerOptions()
        self.sessions: dict[str, EditorSession] = {}
        self.policies = PolicyCache()
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._accepting: set[str] = set()
        self._stopping = False  # after `shutdown`: sessions are cancelled, nothing more is sent
        self.configured = asyncio.Event()  # set once the first workspace/configuration pull is over
        self._watched: dict[str, tuple[EditorSession, str]] = {}  # uri -> (session, path) awaiting "kept"

    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        """Serve over `stdin`/`stdout` (binary streams; the process's by default) until `exit` or
        the end of `stdin`. Frames are checked (`lsp_server.framing.CheckedReader`: bounded size,
        bad frames dropped with a logged reason, reading resumes at the next valid header).

        Raises SystemExit(1) after an `exit` that came without `shutdown` (pygls swallows it)."""
        reader = CheckedReader(stdin or sys.stdin.buffer, FrameDecoder(self.max_message_bytes))
        super().start_io(reader, stdout)  # type: ignore[arg-type]
        if self.protocol.exit_code:
            raise SystemExit(self.protocol.exit_code)

    def start_tcp(self, host: str, port: int) -> None:
        """Serve one client connecting to `host:port` (debugging), through the same checked path
        as `start_io`; returns when that connection ends (pygls, too, serves only one)."""
        with socket.create_server((host, port)) as listener:
            logger.info("listening on %s:%d", host, port)
            connection, _ = listener.accept()
        with connection, connection.makefile("rb") as stdin, connection.makefile("wb") as stdout:
            self.start_io(stdin, stdout)

    # ---- configuration ------------------------------------------------------------------------

    def configure(self, update: Any, *, source: str) -> None:
        """Merge `update` (wire names) into the options; a bad value is reported and ignored."""
        if not update:
            return
        try:
            if not isinstance(update, dict):
                raise ValueError(f"expected an object, got {type(update).__name__}")
            self.options = self.options.merged(update)
        except ValueError as exc:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Error, message=f"recap: bad {source}, keeping the previous settings: {exc}"))

    async def pull_configuration(self) -> None:
        """Read the `recap` section of `workspace/configuration` when the client offers it."""
        caps = self.client_capabilities.workspace
        try:
            if caps is not None and caps.configuration:
                result = await self.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(section="recap")]))
                if result:
                    self.configure(result[0], source="workspace/configuration")
        except JsonRpcException as exc:
            logger.warning("workspace/configuration failed: %s", exc)
        finally:
            self.configured.set()

    # ---- documents ----------------------------------------------------------------------------

    def repo_for(self, uri: str | None) -> Path:
        """The workspace folder a run works on: the one holding `uri`, else the first one."""
        roots = [Path(p) for p in (to_fs_path(f.uri) for f in self.workspace.folders.values()) if p]
        if not roots and self.workspace.root_path:
            roots = [Path(self.workspace.root_path)]
        if not roots:
            raise invalid("recap.run: the client opened no workspace folder; open a folder first")
        path = Path(to_fs_path(uri) or "") if uri else None
        if path is not None:
            holding = [r for r in roots if r == path or r in path.parents]
            if holding:
                return max(holding, key=lambda r: len(r.parts))
        return roots[0]

    def relative(self, repo: Path, uri: str) -> str | None:
        path = to_fs_path(uri)
        if not path:
            return None
        try:
            return Path(path).relative_to(repo).as_posix()
        except ValueError:
            return None

    def unsaved_buffers(self, repo: Path) -> dict[str, str]:
        """Open documents under `repo` whose text differs from the file on disk."""
        buffers: dict[str, str] = {}
        for uri, doc in self.workspace.text_documents.items():
            rel = self.relative(repo, uri)
            if rel is None:
                continue
            on_disk = edits.read_disk(repo / rel)
            if on_disk != doc.source:
                buffers[rel] = doc.source
        return buffers

    def current(self, repo: Path, path: str) -> tuple[str | None, int | None, bool]:
        """What the user has now for `path`: (text or None when absent, open version, is open)."""
        uri = from_fs_path(str(repo / path))
        doc = self.workspace.text_documents.get(uri)
        if doc is not None:
            return doc.source, doc.version, True
        return edits.read_disk(repo / path), None, False

    def compose_prompt(self, params: RunParams, repo: Path) -> str:
        """The task plus what the user pointed at (a file, or the lines of a range)."""
        if params.uri is None:
            return params.task
        rel = self.relative(repo, params.uri) or to_fs_path(params.uri) or params.uri
        if params.range is None:
            return f"{params.task}\n\nContext: the file {rel}."
        doc = self.workspace.get_text_document(params.uri)
        try:
            lines = doc.lines
        except OSError:
            lines = []
        first, last = params.range.start.line, params.range.end.line
        if params.range.end.character == 0 and last > first:
            last -= 1
        excerpt = "".join(lines[first:last + 1]).rstrip("\n")
        return f"{params.task}\n\nContext: {rel}, lines {first + 1}-{last + 1}:\n```\n{excerpt}\n```"

    # ---- sessions -----------------------------------------------------------------------------

    def session(self, session_id: str, command: str) -> EditorSession:
        found = self.sessions.get(session_id)
        if found is None:
            known = ", ".join(self.sessions) or "none"
            raise invalid(f"{command}: unknown session {session_id!r} (known sessions: {known})")
        return found

    def start_run(self, params: RunParams, work_done_token: str | int | None) -> EditorSession:
        from harness.session import default_sessions_dir, new_session_id

        repo = self.repo_for(params.uri)
        adapter = newest_adapter(self.options.adapter_dir)
        session_id = new_session_id()
        sessions_dir = self.options.sessions_dir or default_sessions_dir()
        session = EditorSession(
            id=session_id,
            task=params.task,
            prompt=self.compose_prompt(params, repo),
            repo=repo,
            buffers=self.unsaved_buffers(repo),
            session_path=sessions_dir / f"{session_id}.jsonl",
            adapter_id=adapter.id if adapter else None,
            adapter_path=adapter.path if adapter else None,
            progress_token=work_done_token,
        )
        self.sessions[session_id] = session
        task = asyncio.get_running_loop().create_task(self._drive(session, self.options))
        self._runs[session_id] = task
        task.add_done_callback(lambda _: self._runs.pop(session_id, None))
        return session

    async def _drive(self, session: EditorSession, options: ServerOptions) -> None:
        """Run `session` to its end: progress, events, the worker thread, the final state."""
        from harness.config import RecapConfig
        from harness.errors import RecapError

        await self._begin_progress(session)
        self.send_event(session, {"type": "state", "state": session.state})
        loop = asyncio.get_running_loop()

        def on_event(event: Any) -> None:
            loop.call_soon_threadsafe(self._on_agent_event, session, event)

        def on_text(text: str) -> None:
            loop.call_soon_threadsafe(self.send_event, session, {"type": "delta", "text": text})

        try:
            config = RecapConfig.load(None, max_steps=options.max_steps, max_new_tokens=options.max_new_tokens,
                                      summarize_at=options.summarize_at, hard_limit=options.hard_limit,
                                      context_window=options.context_window, tokenizer=options.tokenizer,
                                      timeout_s=options.timeout_s, max_retries=options.max_retries)
        except RecapError as exc:
            self._finish(session, "failed", str(exc))
            return
        try:
            outcome = await self._in_thread(session, options, config, on_event, on_text)
        except asyncio.CancelledError:  # the connection is going away: stop the worker too
            session.stop()
            raise
        session.proposal, session.log = outcome.proposal, outcome.log
        self._finish(session, outcome.state, outcome.message)

    async def _in_thread(self, session: EditorSession, options: ServerOptions, config: Any,
                         on_event: Any, on_text: Any) -> Any:
        """`runs.execute` in a worker thread, with the shared policies, the configured backend and
        the session file."""
        from harness.session import SessionWriter
        from shadow_backend import open_backend

        return await asyncio.to_thread(
            execute,
            session,
            policy=lambda: self.policies.get(options.model, endpoint=options.endpoint, api_key=options.api_key,
                                             adapter=session.adapter_path,
                                             **config.model.policy_options(options.model)),
            open_workspace=lambda: open_backend(options.backend, session.repo, buffers=session.buffers),
            config=config,
            open_log=lambda: SessionWriter(session.session_path),
            on_event=on_event,
            on_text=on_text,
            model_spec=options.model,
        )

    async def _begin_progress(self, session: EditorSession) -> None:
        caps = self.client_capabilities.window
        if session.progress_token is None and caps is not None and caps.work_done_progress:
            token = f"recap-{session.id}"
            try:
                await self.work_done_progress.create_async(token)
                session.progress_token = token
            except JsonRpcException as exc:
                logger.warning("the client refused a progress token: %s", exc)
        if session.progress_token is not None:
            self.work_done_progress.begin(session.progress_token, types.WorkDoneProgressBegin(
                title=f"recap: {session.task}", cancellable=True, message="starting"))

    def _on_agent_event(self, session: EditorSession, event: Any) -> None:
        if self._stopping:
            return
        line = session.observe(event)
        if line and session.progress_token is not None and session.state == "running":
            self.work_done_progress.report(session.progress_token, types.WorkDoneProgressReport(message=line))
        self.protocol.notify(EVENT_NOTIFICATION, event_payload(session.id, event))

    def _finish(self, session: EditorSession, state: str, message: str | None) -> None:
        session.state = state  # type: ignore[assignment]
        session.message = message
        if self._stopping:
            return
        if session.progress_token is not None:
            end = state if not message else f"{state}: {message}"
            self.work_done_progress.end(session.progress_token, types.WorkDoneProgressEnd(message=end))
        self.send_event(session, {"type": "state", "state": state, **({"message": message} if message else {})})

    def send_event(self, session: EditorSession, payload: dict[str, Any]) -> None:
        self.protocol.notify(EVENT_NOTIFICATION, {"session": session.id, **payload})

    def set_state(self, session: EditorSession, state: str) -> None:
        session.state = state  # type: ignore[assignment]
        self.send_event(session, {"type": "state", "state": state})

    def record_verdict(self, session: EditorSession, verdict: str, **fields: Any) -> None:
        from harness.session import Verdict

        if session.log is None:
            return
        event = session.log.emit(Verdict, verdict=verdict, **fields)
        self.protocol.notify(EVENT_NOTIFICATION, event_payload(session.id, event))

    async def cancel(self, session: EditorSession) -> None:
        """Stop a running session and wait (up to CANCEL_WAIT_S) for its worker to close the workspace."""
        session.stop()
        run = self._runs.get(session.id)
        if run is not None:
            await asyncio.wait({run}, timeout=CANCEL_WAIT_S)

    def cancel_token(self, token: str | int) -> None:
        for session in self.sessions.values():
            if session.progress_token == token and session.state == "running":
                session.stop()

    # ---- verdicts -----------------------------------------------------------------------------

    async def accept(self, session: EditorSession, files: list[str] | None) -> dict[str, Any]:
        """Send the proposal (or the chosen `files` of it) as one `workspace/applyEdit`."""
        if session.state != "finished" or session.proposal is None:
            raise invalid(f"recap.accept: session {session.id} is {session.state}; only a finished session can be accepted")
        proposal = session.proposal
        chosen = list(files) if files is not None else [f.path for f in proposal.files]
        unknown = [p for p in chosen if proposal.file(p) is None]
        if unknown:
            offered = ", ".join(f.path for f in proposal.files) or "none"
            raise invalid(f"recap.accept: {', '.join(unknown)} not in the proposal (it changes: {offered})")
        refused = {"session": session.id, "state": session.state, "applied": False, "files": []}
        if not chosen:
            return {**refused, "message": "the session proposes no change"}
        caps = self.client_capabilities.workspace
        edit_caps = caps.workspace_edit if caps is not None else None
        # resource operations exist only inside documentChanges, so a client that lists them takes
        # documentChanges even when it does not say so (Neovim 0.11)
        takes_document_changes = edit_caps is not None and bool(edit_caps.document_changes or edit_caps.resource_operations)
        if caps is None or not caps.apply_edit or not takes_document_changes:
            return {**refused, "message": "this editor cannot apply versioned workspace edits "
                                          "(workspace.applyEdit with documentChanges); apply recap.proposal's diff instead"}
        plan = edits.plan_edit(
            [proposal.file(p) for p in chosen],  # type: ignore[misc]
            current=lambda p: self.current(session.repo, p),
            uri=lambda p: from_fs_path(str(session.repo / p)),
            label=f"recap: {session.task}",
            confirm=self.options.confirm_accept,
        )
        if plan.conflicts:
            return {**refused, "message": "not applied, nothing changed: " + "; ".join(plan.conflicts)}
        if session.id in self._accepting:
            raise invalid(f"recap.accept: session {session.id} is already being accepted")
        self._accepting.add(session.id)
        try:
            response = await self.workspace_apply_edit_async(
                types.ApplyWorkspaceEditParams(edit=plan.edit, label=f"recap: {session.task}"))
        except JsonRpcException as exc:
            return {**refused, "message": f"the client failed to apply the edit: {exc}"}
        finally:
            self._accepting.discard(session.id)
        if not response.applied:
            reason = response.failure_reason or "the client did not apply the edit"
            return {**refused, "message": reason}
        self.set_state(session, "accepted")
        self.record_verdict(session, "accepted", files=chosen)
        for path, lines in plan.inserted.items():
            session.accepted[path] = lines
            self._watched[from_fs_path(str(session.repo / path))] = (session, path)
        return {"session": session.id, "state": session.state, "applied": True, "files": chosen}

    def reject(self, session: EditorSession, reason: str | None) -> dict[str, Any]:
        if session.state != "finished":
            raise invalid(f"recap.reject: session {session.id} is {session.state}; only a finished session can be rejected")
        self.set_state(session, "rejected")
        self.record_verdict(session, "rejected", reason=reason)
        return {"session": session.id, "state": session.state}

    def check_kept(self, uri: str, text: str | None) -> None:
        """After an accepted file's next save or close: are the accepted lines still there?"""
        watched = self._watched.pop(uri, None)
        if watched is None:
            return
        session, path = watched
        wanted = Counter(session.accepted.get(path, []))
        have = Counter(line.strip() for line in (text or "").splitlines())
        still = sum(min(n, have[line]) for line, n in wanted.items())
        total = sum(wanted.values())
        verdict = "kept" if still == total else "reverted"
        self.record_verdict(session, verdict, files=[path], reason=f"{still} of {total} accepted lines still there")

    def terminate(self, *, timeout_s: float) -> None:
        """On SIGTERM: cancel every run and wait (up to `timeout_s` in all) for the workers to close
        their workspaces. Blocks the event loop; the process exits right after."""
        self.shutdown_sessions()
        deadline = time.monotonic() + timeout_s
        for session in list(self.sessions.values()):
            session.idle.wait(max(0.0, deadline - time.monotonic()))

    def shutdown_sessions(self) -> None:
        """On `shutdown`: cancel every run (their workers close their workspaces) and close the logs."""
        self._stopping = True
        for session in self.sessions.values():
            session.stop()
            if session.log is not None and session.state != "running":  # a running worker still writes its Final
                session.log.close()
