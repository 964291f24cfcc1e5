"""Fixtures of the language-server tests: a small git repository and real `recap serve` processes
driven by `lsp_helpers.Editor`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.uris import from_fs_path
from pytest_lsp import LanguageClient
from pytest_lsp.client import register_lsp_features

from lsp_helpers import CAPABILITIES, RECAP, Editor, RawCodeActionProtocol, StartEditor, git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one committed Python file."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n")
    (root / "notes.txt").write_text("first\nsecond\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


@pytest_asyncio.fixture
async def start_editor(tmp_path: Path) -> AsyncIterator[StartEditor]:
    """`await start_editor(root, env=None, configuration=None, **initialization_options)`: a real
    `recap serve` and its editor; `configuration` is what the client answers to
    `workspace/configuration` for the section `recap`.

    `sessionsDir` defaults to `tmp_path/sessions`. Servers are shut down at the end of the test.
    """
    clients: list[LanguageClient] = []

    async def start(root: Path, *, capabilities: types.ClientCapabilities = CAPABILITIES,
                    env: dict[str, str] | None = None, configuration: dict[str, Any] | None = None,
                    **options: Any) -> Editor:
        client = LanguageClient(protocol_cls=RawCodeActionProtocol)
        register_lsp_features(client)
        editor = Editor(client, root)
        if configuration is not None:
            client.set_configuration(configuration, section="recap")
        await client.start_io(RECAP, "serve", env={**os.environ, **(env or {})})
        clients.append(client)
        options.setdefault("sessionsDir", str(tmp_path / "sessions"))
        editor.init = await client.initialize_session(types.InitializeParams(
            capabilities=capabilities,
            root_uri=from_fs_path(str(root)),
            workspace_folders=[types.WorkspaceFolder(uri=from_fs_path(str(root)), name=root.name)],
            initialization_options=options,
        ))
        return editor

    yield start
    for client in clients:
        if client._server is not None and client._server.returncode is None:  # not stopped by the test
            await client.shutdown_session()
        await client.stop()
