"""The recap language server (pygls): runs the agent inside any LSP editor.

Public names: `create_server` (a `RecapServer` with its handlers), `RecapServer`, `COMMANDS`.
The wire contract is `docs/lsp-protocol.md`. Modules: `server` (the server and its state),
`handlers` (the LSP handlers), `runs` (one session's state and worker), `options` (validated
client input), `proposal` (a run's change), `merge` and `edits` (rebasing it into a
`WorkspaceEdit`), `adapters` (the newest LoRA adapter), `policies` (policies shared across sessions),
`framing` (the checked LSP base protocol).

Threat model of this boundary (the client's byte stream: stdin, or the one `--tcp` connection):
- The client is trusted to direct the agent, as the user would with `recap run`: it picks the
  task, the workspace folder, the model and the backend. Whoever can write to the server's stdin
  (or connect to its `--tcp` port: bind it to 127.0.0.1) can start runs; what a run's model does
  is contained by the shadow backend, not here.
- The client is not trusted to be well-formed: its bytes may be truncated, garbled, huge or
  hostile (a crashed plugin, a proxy, a fuzzer). Whatever it sends, the server
  - bounds memory: a message body is at most `RECAP_LSP_MAX_MESSAGE_BYTES` (64 MiB by default), a
    header block at most 8 KiB; nothing is allocated from a size the client claims beyond that;
  - never dies and never goes deaf on bytes: a frame with a bad header (missing, duplicate,
    negative, zero, non-numeric or over-cap `Content-Length`, a malformed or endless header) is
    dropped with a logged reason and reading resumes at the next `Content-Length: N\r\n`; a body
    that is not one JSON object (invalid UTF-8 or JSON, too deep, an array) is dropped with a
    logged reason; the end of the stream ends the server (exit 0), logging an unfinished frame;
  - answers every request it can identify (an integer or string id and a method): ServerNotInitialized
    (-32002) before `initialize`; InvalidRequest (-32600) for a second `initialize`, after
    `shutdown`, or for an object that is not JSON-RPC 2.0; InvalidParams (-32602, naming the field)
    for params of the wrong shape or bad command arguments (`options` validates every argument);
    a message without a usable id is dropped with a log line;
  - follows the lifecycle: notifications before `initialize` are dropped (`exit` excepted);
    `exit` exits with 0 after `shutdown`, 1 otherwise.
- Not covered: pygls itself still logs tracebacks (at ERROR, on stderr) for handler errors and
  params it cannot convert, although the client gets a proper error response.
"""

from lsp_server.handlers import create_server
from lsp_server.server import COMMANDS, RecapServer

__all__ = ["COMMANDS", "RecapServer", "create_server"]
