#!/usr/bin/env bash
# Idempotent: what the test suite needs besides the venv. Installs docker.io and debootstrap when
# missing (as root, with apt-get), starts dockerd when no daemon answers, and builds the offline
# base image `recap-base` (skipped when it exists).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "services: installing docker.io and debootstrap with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
  else
    echo "services: docker.io and debootstrap are needed; install them (apt-get install docker.io debootstrap)" >&2
    exit 1
  fi
fi

if ! docker info >/dev/null 2>&1; then
  echo "services: starting dockerd"
  if [ "$(id -u)" = 0 ]; then
    nohup dockerd >/tmp/recap-dockerd.log 2>&1 &
  else
    sudo -n nohup dockerd >/tmp/recap-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "services: dockerd did not start; see /tmp/recap-dockerd.log" >&2; exit 1; }
fi

.venv/bin/recap backend build-image --name recap-base

# The real llama.cpp server for the `llamacpp` tests, built from source with cmake the first time
# (15-35 minutes on 2 cores) as a portable wheel kept in ~/.cache/recap/wheels: the native build
# (AMX, AVX-512, OpenMP) died with SIGSEGV on every generation here, and pip's own cache would hand
# back that build. Later venvs on the same machine install the kept wheel at once.
if ! .venv/bin/python -c "import llama_cpp.server" >/dev/null 2>&1; then
  wheels="${XDG_CACHE_HOME:-$HOME/.cache}/recap/wheels/llama-cpp-portable"
  if ! ls "$wheels"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
    echo "services: building llama-cpp-python 0.3.36 (first build: 15-35 minutes)"
    start=$(date +%s)
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=OFF" \
      .venv/bin/pip wheel -q --no-cache-dir --no-deps -w "$wheels" 'llama-cpp-python==0.3.36'
    echo "services: llama-cpp-python built in $(( $(date +%s) - start )) s"
  fi
  .venv/bin/pip install -q --find-links "$wheels" 'llama-cpp-python[server]==0.3.36'
fi

command -v node >/dev/null && command -v npm >/dev/null || {
  echo "services: node and npm are needed for the editor plugin tests" >&2; exit 1; }

# the editor tests drive a real VS Code in Chromium (tests/editors) and Neovim's TUI inside tmux
editor_tools=()
command -v chromium >/dev/null || editor_tools+=(chromium)
command -v tmux >/dev/null || editor_tools+=(tmux)
if ((${#editor_tools[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "services: installing ${editor_tools[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${editor_tools[@]}" >/dev/null
  else
    echo "services: the editor tests need ${editor_tools[*]} (apt-get install ${editor_tools[*]})" >&2; exit 1
  fi
fi
