#!/usr/bin/env bash
# The test command: set-up (idempotent), the services the tests need, then the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/harness -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
