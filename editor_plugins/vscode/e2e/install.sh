#!/usr/bin/env bash
# Install what the real-workbench test (e2e/workbench.test.mjs) needs into a cache folder, once:
# code-server (VS Code in a browser, from npm) and puppeteer-core (drives Chromium over the DevTools
# protocol). Later runs find the stamp and return at once.
#
#   e2e/install.sh [CACHE]        (default: editor_plugins/vscode/.e2e-cache, git-ignored)
#
# code-server is installed with --ignore-scripts: its postinstall would download ripgrep from
# GitHub and build every native module. Instead the native modules the server needs are built here
# with npm's own node-gyp against the installed node's headers, and ripgrep is the system's
# (`rg`, Debian's ripgrep). Chromium is the system's too (Debian's `chromium`; scripts/services.sh
# installs both).
set -euo pipefail

CODE_SERVER=4.99.4
PUPPETEER=24.43.1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${1:-$here/../.e2e-cache}
stamp="$cache/.installed-code-server-$CODE_SERVER-puppeteer-$PUPPETEER"
[[ -f "$stamp" ]] && exit 0

rg=$(command -v rg) || { echo "e2e/install.sh: ripgrep (rg) is missing: apt-get install ripgrep" >&2; exit 1; }
mkdir -p "$cache"
cd "$cache"
[[ -f package.json ]] || echo '{"name": "recap-e2e-cache", "private": true}' > package.json
npm install --ignore-scripts --no-audit --no-fund --save-exact "code-server@$CODE_SERVER" "puppeteer-core@$PUPPETEER"

node_prefix=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
nodedir=()
[[ -f "$node_prefix/include/node/node_api.h" ]] && nodedir=(--nodedir="$node_prefix")
gyp="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
build() { (cd "$1" && shift && node "$gyp" rebuild "${nodedir[@]}" "$@" >/dev/null); }

# code-server's password hashing, loaded at start; the variables node-pre-gyp would pass
build node_modules/argon2 --module_name=argon2 --module_path="$PWD/node_modules/argon2/lib/binding/napi-v3" --napi_build_version=3
vscode=node_modules/code-server/lib/vscode
(cd "$vscode" && npm install --omit=dev --ignore-scripts --no-audit --no-fund)
for module in node-pty @vscode/spdlog native-watchdog; do build "$vscode/node_modules/$module"; done
mkdir -p "$vscode/node_modules/@vscode/ripgrep/bin"
ln -sf "$rg" "$vscode/node_modules/@vscode/ripgrep/bin/rg"
ln -sfn node_modules "$vscode/node_modules.asar"   # what code-server's postinstall does
node node_modules/code-server/out/node/entry.js --version --config /dev/null >/dev/null
touch "$stamp"
