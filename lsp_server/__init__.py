"""The recap language server (pygls): runs the agent inside any LSP editor.

Public names: `create_server` (a `RecapServer` with its handlers), `RecapServer`, `COMMANDS`.
The wire contract is `docs/lsp-protocol.md`. Modules: `server` (the server and its state),
`handlers` (the LSP handlers), `runs` (one session's state and worker), `options` (validated
client input), `proposal` (a run's change), `merge` and `edits` (rebasing it into a
`WorkspaceEdit`), `adapters` (the newest LoRA adapter), `policies` (policies shared across sessions).
"""

from lsp_server.handlers import create_server
from lsp_server.server import COMMANDS, RecapServer

__all__ = ["COMMANDS", "RecapServer", "create_server"]
