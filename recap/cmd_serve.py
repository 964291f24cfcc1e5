"""`recap serve`: the language server over stdio (what editors start) or TCP (for debugging)."""

from __future__ import annotations

from typing import Optional

import typer


def serve(
    tcp: Optional[str] = typer.Option(None, "--tcp", metavar="HOST:PORT", help="Listen on TCP instead of stdio (debugging)."),
) -> None:
    """Run the recap language server (LSP 3.17; commands in docs/lsp-protocol.md)."""
    from lsp_server import create_server

    server = create_server()
    if tcp is None:
        server.start_io()
        return
    host, sep, port = tcp.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise typer.BadParameter(f"expected HOST:PORT, got {tcp!r}", param_hint="--tcp")
    server.start_tcp(host, int(port))


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
