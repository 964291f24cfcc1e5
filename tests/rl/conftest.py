"""Fixtures of the RL tests: a tiny buggy repository with its task sessions, and a fake vLLM server."""

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
import sys
import time

import pytest

from harness.session import SCHEMA_VERSION, SessionStart

BUG = '''diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a + b
+    return a - b
'''
FIX = BUG.replace("-    return a + b\n+    return a - b", "-    return a - b\n+    return a + b")


def make_task_sessions(root, *, count: int = 2):
    """A git repo with calc.py and `count` task sessions (the same bug) whose verify fails until fixed."""
    repo = root / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "calc"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    sessions = root / "sessions"
    sessions.mkdir()
    verify = f"{sys.executable} -c 'import calc; assert calc.add(1, 2) == 3'"
    for i in range(count):
        start = SessionStart(
            seq=0, ts=time.time(), schema_version=SCHEMA_VERSION, session_id=f"calc-{i}", source="task",
            repo=str(repo), base_commit=commit, base_diff=BUG, task=f"add() in calc.py is wrong ({i}); fix it.",
            model="", verify=verify, reference_diff=FIX,
        )
        (sessions / f"calc-{i}.jsonl").write_text(start.model_dump_json() + "\n")
    return sessions


@pytest.fixture
def task_sessions(tmp_path):
    return make_task_sessions(tmp_path)


FIXED = "def add(a, b):\n    return a + b\n"


class _FakeVLLM(BaseHTTPRequestHandler):
    """Serves /v1/models, /v1/chat/completions and vLLM's LoRA loading endpoints.

    Chat: a seed with bit 1 clear fixes calc.py on its first turn, the others finish without changing
    anything, so a group has a reward spread. Logprobs: one per token of the learner's tokenizer,
    the stop token included, named `token_id:N` when the request asks `return_tokens_as_token_ids`.
    """

    log: list = []
    tokenizer = None

    def log_message(self, *args):
        pass

    def _reply(self, payload):
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._reply({"object": "list", "data": [{"id": "base-model", "object": "model"}]})

    def do_POST(self):
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.log.append((self.path, data))
        if self.path.endswith("_lora_adapter"):
            return self._reply({"status": "ok"})
        first = not any(m["role"] == "assistant" for m in data["messages"])
        if first and (data.get("seed", 1) // 2) % 2 == 0:
            call = {"name": "write_file", "arguments": {"path": "calc.py", "content": FIXED}}
        else:
            call = {"name": "finish", "arguments": {"message": "done"}}
        text = "<tool_call>\n" + json.dumps(call, separators=(",", ":")) + "\n</tool_call>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        n = len(ids)
        named = data.get("return_tokens_as_token_ids")  # vLLM names the sampled tokens by id
        self._reply({
            "id": "x", "object": "chat.completion", "created": 0, "model": data["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text},
                         "logprobs": {"content": [{"token": f"token_id:{i}" if named else "t", "logprob": -0.5,
                                                   "bytes": None, "top_logprobs": []} for i in ids]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n},
        })


@pytest.fixture
def fake_vllm():
    """A running fake OpenAI-compatible server; `.url` (with /v1) and `.log` of (path, request)."""
    from harness.policies.loading import embedded_tokenizer

    _FakeVLLM.tokenizer = embedded_tokenizer()
    _FakeVLLM.log = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeVLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_port}/v1", log=_FakeVLLM.log)
    finally:
        server.shutdown()
