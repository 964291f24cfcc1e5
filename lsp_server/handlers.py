"""The LSP handlers of recap: thin adapters from protocol messages to `RecapServer` methods.

Each handler validates its input (`lsp_server.options`), calls the server, and returns plain JSON
values; `create_server` registers them all on a new server. The contract is `docs/lsp-protocol.md`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from lsp_server import edits
from lsp_server.options import AcceptParams, RejectParams, RunParams, SessionParams, StatusParams, parse
from lsp_server.server import CONFIGURATION_WAIT_S, EXECUTE_PARAMS, RecapServer, invalid

logger = logging.getLogger(__name__)


def arguments(model: type, args: tuple[Any, ...], command: str) -> Any:
    """The one object argument of `command`, validated; InvalidParams otherwise."""
    if len(args) != 1:
        raise invalid(f"{command} takes one argument, an object; got {len(args)} arguments")
    try:
        return parse(model, args[0])
    except ValueError as exc:
        raise invalid(f"{command}: {exc}") from None


def create_server() -> RecapServer:
    """A server with every handler registered (one per client connection)."""
    server = RecapServer()

    @server.feature(types.INITIALIZE)
    def _initialize(ls: RecapServer, params: types.InitializeParams) -> None:
        ls.configure(params.initialization_options, source="initializationOptions")

    @server.feature(types.INITIALIZED)
    async def _initialized(ls: RecapServer, params: types.InitializedParams) -> None:
        await ls.pull_configuration()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def _configuration_changed(ls: RecapServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings.get("recap") if isinstance(params.settings, dict) else None
        if settings:
            ls.configure(settings, source="workspace/didChangeConfiguration")
        else:
            await ls.pull_configuration()

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def _saved(ls: RecapServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.check_kept(params.text_document.uri, ls.workspace.get_text_document(params.text_document.uri).source)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def _closed(ls: RecapServer, params: types.DidCloseTextDocumentParams) -> None:
        path = to_fs_path(params.text_document.uri)
        ls.check_kept(params.text_document.uri, edits.read_disk(Path(path)) if path else None)

    @server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def _progress_cancelled(ls: RecapServer, params: types.WorkDoneProgressCancelParams) -> None:
        ls.cancel_token(params.token)

    @server.feature(types.SHUTDOWN)
    def _shutdown(ls: RecapServer, params: None) -> None:
        ls.shutdown_sessions()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.RefactorRewrite]),
    )
    def _code_actions(ls: RecapServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return code_actions(params)

    @server.command("recap.run")
    async def _run(ls: RecapServer, *args: Any) -> dict[str, Any]:
        params = arguments(RunParams, args, "recap.run")
        execute_params = EXECUTE_PARAMS.get()
        token = execute_params.work_done_token if execute_params is not None else None
        try:  # the settings a run uses may still be on their way from the client
            await asyncio.wait_for(ls.configured.wait(), CONFIGURATION_WAIT_S)
        except asyncio.TimeoutError:
            logger.warning("no workspace/configuration answer after %.0f s; using the settings so far", CONFIGURATION_WAIT_S)
        return {"session": ls.start_run(params, token).id}

    @server.command("recap.cancel")
    async def _cancel(ls: RecapServer, *args: Any) -> dict[str, Any]:
        session = ls.session(arguments(SessionParams, args, "recap.cancel").session, "recap.cancel")
        if session.state == "running":
            await ls.cancel(session)
        return {"session": session.id, "state": session.state}

    @server.command("recap.accept")
    async def _accept(ls: RecapServer, *args: Any) -> dict[str, Any]:
        params = arguments(AcceptParams, args, "recap.accept")
        return await ls.accept(ls.session(params.session, "recap.accept"), params.files)

    @server.command("recap.reject")
    def _reject(ls: RecapServer, *args: Any) -> dict[str, Any]:
        params = arguments(RejectParams, args, "recap.reject")
        return ls.reject(ls.session(params.session, "recap.reject"), params.reason)

    @server.command("recap.status")
    def _status(ls: RecapServer, *args: Any) -> dict[str, Any]:
        params = arguments(StatusParams, args, "recap.status") if args else StatusParams()
        if params.session is not None:
            return ls.session(params.session, "recap.status").status()
        return {"sessions": [s.status() for s in ls.sessions.values()]}

    @server.command("recap.proposal")
    def _proposal(ls: RecapServer, *args: Any) -> dict[str, Any]:
        session = ls.session(arguments(SessionParams, args, "recap.proposal").session, "recap.proposal")
        if session.proposal is None:
            raise invalid(f"recap.proposal: session {session.id} is {session.state} and has no proposal")
        return {
            "session": session.id,
            "diff": session.proposal.diff,
            "files": [
                {"path": f.path, "uri": from_fs_path(str(session.repo / f.path)), "status": f.status,
                 "original": f.original, "proposed": f.proposed}
                for f in session.proposal.files
            ],
        }

    return server


def code_actions(params: types.CodeActionParams) -> list[types.CodeAction]:
    """"Ask recap to fix" per diagnostic, and "Ask recap about the selection" for a non-empty range."""
    uri = params.text_document.uri
    actions = []
    for diagnostic in params.context.diagnostics:
        first = diagnostic.message.splitlines()[0] if diagnostic.message else "this problem"
        task = f"Fix this problem reported at line {diagnostic.range.start.line + 1}: {diagnostic.message}"
        actions.append(types.CodeAction(
            title=f"Ask recap to fix: {first[:80]}",
            kind=types.CodeActionKind.QuickFix,
            diagnostics=[diagnostic],
            command=_run_command("Ask recap to fix", task, uri, diagnostic.range),
        ))
    if params.range.start != params.range.end:
        actions.append(types.CodeAction(
            title="Ask recap about the selection",
            kind=types.CodeActionKind.RefactorRewrite,
            command=_run_command("Ask recap about the selection",
                                 "Review the selected code and fix any problem you find.", uri, params.range),
        ))
    return actions


def _run_command(title: str, task: str, uri: str, range_: types.Range) -> types.Command:
    wire_range = {"start": {"line": range_.start.line, "character": range_.start.character},
                  "end": {"line": range_.end.line, "character": range_.end.character}}
    return types.Command(title=title, command="recap.run", arguments=[{"task": task, "uri": uri, "range": wire_range}])
