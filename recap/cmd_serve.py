"""`recap serve`: the language server over stdio (what editors start), a client's pipe or socket, or
TCP (for debugging).

Editors' language clients add their transport flags to the command line they were given:
vscode-languageclient appends `--stdio` (or `--pipe=NAME`, `--socket=PORT`) and
`--clientProcessId=PID`. All of them are accepted. With `--pipe`/`--socket` the client is the one
listening and the server connects to it (the LSP convention), on the local machine only.

Threat model: the command line comes from the user's editor configuration, which is trusted; the
peer on the transport is the editor. What reaches stderr ends up in editors' logs (Neovim writes
every stderr line to `lsp.log` as an error), so the server keeps it to real problems: no download
progress bars, and a request refused for bad arguments (a user error, answered with InvalidParams)
is one line without a traceback.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import BinaryIO, Optional

import typer

TERMINATE_WAIT_S = 10.0
"""On SIGTERM, how long running sessions get to stop and close their workspaces."""

QUIET_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1", "TRANSFORMERS_VERBOSITY": "error",
             "TOKENIZERS_PARALLELISM": "false"}
"""Set (unless already set) before a model loads: no progress bars or chatter on stderr."""


class _UserErrorsWithoutTraceback(logging.Filter):
    """pygls logs every failed request with `logger.exception`; for a request refused with
    InvalidParams (bad arguments, unknown session: the client gets the message in the response)
    keep one warning line and drop the traceback. Other errors keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        from pygls.exceptions import JsonRpcInvalidParams

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, JsonRpcInvalidParams):
            record.msg, record.args = "request refused: %s", (exc.message,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _connect(pipe: Optional[str], port: Optional[int]) -> tuple[BinaryIO, BinaryIO]:
    """Connect to the client's named pipe (a Unix socket path) or its TCP port on localhost."""
    if pipe is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        where: object = pipe
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        where = ("127.0.0.1", port)
    try:
        sock.connect(where)  # type: ignore[arg-type]
    except OSError as exc:
        sock.close()
        raise typer.BadParameter(f"cannot connect to the client at {where}: {exc}") from None
    return sock.makefile("rb"), sock.makefile("wb", buffering=0)  # type: ignore[return-value]


def serve(
    tcp: Optional[str] = typer.Option(None, "--tcp", metavar="HOST:PORT", help="Listen on TCP instead of stdio (debugging)."),
    stdio: bool = typer.Option(False, "--stdio", help="Speak over stdin/stdout (the default; language clients pass it)."),
    pipe: Optional[str] = typer.Option(None, "--pipe", metavar="NAME",
                                       help="Connect to the client's named pipe (Unix socket path) instead of stdio."),
    port: Optional[int] = typer.Option(None, "--socket", metavar="PORT", min=1, max=65535,
                                       help="Connect to the client's TCP port on localhost instead of stdio."),
    client_pid: Optional[int] = typer.Option(None, "--clientProcessId", metavar="PID", hidden=True,
                                             help="Accepted for language clients; the initialize request's processId is used."),
) -> None:
    """Run the recap language server (LSP 3.17; commands in docs/lsp-protocol.md)."""
    import signal

    chosen = [flag for flag, value in (("--tcp", tcp), ("--stdio", stdio or None), ("--pipe", pipe), ("--socket", port))
              if value is not None]
    if len(chosen) > 1:
        raise typer.BadParameter(f"choose one transport, got {' and '.join(chosen)}")
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    logging.getLogger("pygls.protocol.json_rpc").addFilter(_UserErrorsWithoutTraceback())

    from lsp_server import create_server

    server = create_server()

    def terminate(signum: int, frame: object) -> None:
        # an editor stopping the server: close the shadow workspaces, then leave at once (the
        # stdin reader thread may be blocked and would hold an orderly exit)
        server.terminate(timeout_s=TERMINATE_WAIT_S)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    if pipe is not None or port is not None:
        server.start_io(*_connect(pipe, port))
        return
    if tcp is None:
        server.start_io()
        return
    host, sep, tcp_port = tcp.rpartition(":")
    if not sep or not host or not tcp_port.isdigit():
        raise typer.BadParameter(f"expected HOST:PORT, got {tcp!r}", param_hint="--tcp")
    server.start_tcp(host, int(tcp_port))


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
