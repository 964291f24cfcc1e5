"""`recap serve`: the language server over stdio (what editors start) or TCP (for debugging)."""

from __future__ import annotations

from typing import Optional

import typer

TERMINATE_WAIT_S = 10.0
"""On SIGTERM, how long running sessions get to stop and close their workspaces."""


def serve(
    tcp: Optional[str] = typer.Option(None, "--tcp", metavar="HOST:PORT", help="Listen on TCP instead of stdio (debugging)."),
) -> None:
    """Run the recap language server (LSP 3.17; commands in docs/lsp-protocol.md)."""
    import os
    import signal

    from lsp_server import create_server

    server = create_server()

    def terminate(signum: int, frame: object) -> None:
        # an editor stopping the server: close the shadow workspaces, then leave at once (the
        # stdin reader thread may be blocked and would hold an orderly exit)
        server.terminate(timeout_s=TERMINATE_WAIT_S)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    if tcp is None:
        server.start_io()
        return
    host, sep, port = tcp.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise typer.BadParameter(f"expected HOST:PORT, got {tcp!r}", param_hint="--tcp")
    server.start_tcp(host, int(port))


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
