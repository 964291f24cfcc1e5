"""The real llama.cpp server (llama-cpp-python's `python -m llama_cpp.server`) serving the embedded
SmolLM2 GGUF on 127.0.0.1, for the `llamacpp` tests and `bench/openai_tokens.py`.

`scripts/services.sh` installs `llama-cpp-python[server]` into the venv when it is missing (it is
built from source with cmake: 15-35 minutes on 2 cores the first time, then pip's wheel cache makes
it instant on the same machine).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


class LlamaServer:
    """A running server; `url` is the API base (…/v1). Use as a context manager or call `close()`.

    Args:
        n_ctx: the context window the server is started with.
        model_alias: the model name it serves.
        start_timeout_s: how long to wait for it to answer `/v1/models`.
    Raises:
        RuntimeError: llama_cpp is not installed, or the server did not come up (its log is quoted).
    """

    def __init__(self, *, n_ctx: int, model_alias: str = "smollm2", start_timeout_s: float = 180.0) -> None:
        from harness.policies.loading import embedded_gguf

        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise RuntimeError("llama-cpp-python is not installed: run scripts/services.sh "
                               "(or pip install 'llama-cpp-python[server]')") from None
        folder, name = embedded_gguf()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.n_ctx, self.model = n_ctx, model_alias
        self.url = f"http://127.0.0.1:{port}/v1"
        self.log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(Path(folder) / name), "--model_alias", model_alias,
               "--chat_format", "chatml-function-calling", "--n_ctx", str(n_ctx), "--host", "127.0.0.1",
               "--port", str(port), "--n_threads", str(min(2, os.cpu_count() or 1))]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as r:
                    if json.loads(r.read())["data"]:
                        return
            except (OSError, ValueError, KeyError):
                time.sleep(0.5)
        self.close()
        raise RuntimeError(f"llama.cpp server did not start: {self.log.read_text(errors='replace')[-2000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
