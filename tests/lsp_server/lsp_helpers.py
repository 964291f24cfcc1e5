"""Helpers of the language-server tests: a scripted editor driving a real `recap serve` over stdio.

`Editor` keeps its open documents with versions, applies `workspace/applyEdit` the way an editor
does (rejecting an edit made against a stale version, creating and deleting files), sends the
resulting `didChange`, and records every `recap/event` notification.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.uris import from_fs_path, to_fs_path
from pytest_lsp import LanguageClient, LanguageClientProtocol

from lsp_server.merge import split_lines

RECAP = str(Path(sys.executable).with_name("recap"))


class RawCodeActionProtocol(LanguageClientProtocol):
    """lsprotocol 2025.0.0 structures a CodeAction that carries a command as a bare Command on the
    client side; this test client reads code-action results as plain JSON instead."""

    def get_result_type(self, method: str) -> Any:
        if method == types.TEXT_DOCUMENT_CODE_ACTION:
            return None
        return super().get_result_type(method)


def apply_text_edits(text: str, edits: list[Any]) -> str:
    """Apply non-overlapping LSP edits (UTF-16 columns) as a client does."""
    lines = split_lines(text)

    def offset(pos: types.Position) -> int:
        if pos.line >= len(lines):
            return len(text)
        units = lines[pos.line].encode("utf-16-le")[: pos.character * 2].decode("utf-16-le")
        return sum(len(line) for line in lines[: pos.line]) + len(units)

    out = text
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        out = out[: offset(edit.range.start)] + edit.new_text + out[offset(edit.range.end):]
    return out


def plain(value: Any) -> Any:
    """pygls hands custom notification params over as namedtuples; back to JSON values."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class Editor:
    """The test's editor: documents, edits, events. Paths are relative to `root`."""

    def __init__(self, client: LanguageClient, root: Path) -> None:
        self.client = client
        self.root = root
        self.docs: dict[str, tuple[int, str]] = {}  # uri -> (version, text)
        self.events: list[dict[str, Any]] = []
        self.edits: list[types.ApplyWorkspaceEditParams] = []
        self.init: types.InitializeResult | None = None
        self.refuse_edits: str | None = None  # a failure reason: answer applyEdit with applied=false
        self._changed = asyncio.Event()

        @client.feature("recap/event")
        def _event(ls: LanguageClient, params: Any) -> None:
            self.events.append(plain(params))
            self._changed.set()

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        def _apply(ls: LanguageClient, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
            self.edits.append(params)
            if self.refuse_edits is not None:
                return types.ApplyWorkspaceEditResult(applied=False, failure_reason=self.refuse_edits)
            return self._apply_edit(params.edit)

    def uri(self, path: str) -> str:
        return from_fs_path(str(self.root / path))

    # -- documents ------------------------------------------------------------------------------

    def open(self, path: str, text: str | None = None) -> None:
        text = (self.root / path).read_text() if text is None else text
        self.docs[self.uri(path)] = (1, text)
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=self.uri(path), language_id="python", version=1, text=text)))

    def type(self, path: str, text: str) -> None:
        """Replace the buffer's text (unsaved), as typing would."""
        uri = self.uri(path)
        version = self.docs[uri][0] + 1
        self.docs[uri] = (version, text)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))

    def text(self, path: str) -> str:
        return self.docs[self.uri(path)][1]

    def save(self, path: str) -> None:
        uri = self.uri(path)
        (self.root / path).write_text(self.docs[uri][1])
        self.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    def close(self, path: str) -> None:
        uri = self.uri(path)
        del self.docs[uri]
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    def _apply_edit(self, edit: types.WorkspaceEdit) -> types.ApplyWorkspaceEditResult:
        for change in edit.document_changes or []:  # check everything first: all or nothing
            if isinstance(change, types.TextDocumentEdit):
                uri, version = change.text_document.uri, change.text_document.version
                if uri in self.docs and version is not None and self.docs[uri][0] != version:
                    return types.ApplyWorkspaceEditResult(applied=False, failure_reason=f"stale version of {uri}")
        for change in edit.document_changes or []:
            if isinstance(change, types.CreateFile):
                path = Path(to_fs_path(change.uri))
                if path.exists() and not (change.options and change.options.overwrite):
                    return types.ApplyWorkspaceEditResult(applied=False, failure_reason=f"{path} exists")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("")
            elif isinstance(change, types.DeleteFile):
                Path(to_fs_path(change.uri)).unlink()
            elif isinstance(change, types.TextDocumentEdit):
                uri = change.text_document.uri
                if uri in self.docs:
                    version, text = self.docs[uri]
                    self.type(Path(to_fs_path(uri)).relative_to(self.root).as_posix(), apply_text_edits(text, change.edits))
                else:
                    path = Path(to_fs_path(uri))
                    path.write_text(apply_text_edits(path.read_text(), change.edits))
        return types.ApplyWorkspaceEditResult(applied=True)

    # -- commands and events --------------------------------------------------------------------

    async def command(self, name: str, *arguments: Any, token: str | None = None) -> Any:
        return await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(arguments), work_done_token=token))

    async def error(self, name: str, *arguments: Any) -> JsonRpcException:
        """Run a command that must fail; return the JSON-RPC error."""
        with pytest.raises(JsonRpcException) as info:
            await self.command(name, *arguments)
        return info.value

    def session_events(self, session: str, type_: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["session"] == session and (type_ is None or e["type"] == type_)]

    async def wait_for(self, predicate: Callable[[], Any], *, timeout_s: float = 60.0) -> Any:
        async def poll() -> Any:
            while not (found := predicate()):  # woken by each recap/event, else every 50 ms
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
            return found

        return await asyncio.wait_for(poll(), timeout_s)

    async def wait_state(self, session: str, *states: str, timeout_s: float = 60.0) -> str:
        """Wait for a `state` event of `session` in `states`; return it."""
        def seen() -> str | None:
            return next((e["state"] for e in reversed(self.session_events(session, "state")) if e["state"] in states), None)

        return await self.wait_for(seen, timeout_s=timeout_s)

    async def run(self, task: str, **extra: Any) -> str:
        result = await self.command("recap.run", {"task": task, **extra})
        return result["session"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted assistant turn making one tool call."""
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def script(tmp_path: Path, turns: list[Any], name: str = "script.json") -> str:
    """Write a scripted policy's turns; return its model spec."""
    path = tmp_path / name
    path.write_text(json.dumps(turns))
    return f"scripted:{path}"


CAPABILITIES = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(
        apply_edit=True,
        configuration=True,
        workspace_edit=types.WorkspaceEditClientCapabilities(
            document_changes=True,
            resource_operations=[types.ResourceOperationKind.Create, types.ResourceOperationKind.Rename,
                                 types.ResourceOperationKind.Delete],
            change_annotation_support=types.ChangeAnnotationsSupportOptions(groups_on_label=True),
        ),
    ),
    window=types.WindowClientCapabilities(work_done_progress=True),
    text_document=types.TextDocumentClientCapabilities(
        code_action=types.CodeActionClientCapabilities(
            code_action_literal_support=types.ClientCodeActionLiteralOptions(
                code_action_kind=types.ClientCodeActionKindOptions(value_set=list(types.CodeActionKind))))),
)


StartEditor = Callable[..., Awaitable[Editor]]
