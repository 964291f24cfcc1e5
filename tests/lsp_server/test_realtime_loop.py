"""The real-time loop end to end (Composer 2's "logs -> checkpoint -> hot reload"), in one test:
a running `recap serve` logs editor sessions with their verdicts, `recap train` (the `tiny` model,
one step) learns on exactly those session files, and the same server, still running, plays its next
session with the new adapter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from lsprotocol import types

from harness.session import Verdict, read_session
from lsp_helpers import call, script


async def test_logged_verdicts_train_an_adapter_the_running_server_then_uses(start_editor, repo: Path, tmp_path: Path) -> None:
    from rl.train import TrainConfig, train

    sessions, run = tmp_path / "sessions", tmp_path / "run"
    fix = script(tmp_path, [call("read_file", path="calc.py"), call("edit_file", path="calc.py", old_string="return a - b", new_string="return a + b"),
                            call("finish", message="fixed")], name="fix.json")
    scribble = script(tmp_path, [call("write_file", path="notes.txt", content="scribbled\n"),
                                 call("finish", message="done")], name="scribble.json")
    editor = await start_editor(repo, model=fix, adapterDir=str(run), maxSteps=3)

    def use_model(spec: str, **options: int) -> None:
        editor.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"recap": {"model": spec, **options}}))

    # 1. two editor sessions, one accepted and one rejected, logged by the server
    accepted = await editor.run("fix add")
    assert await editor.wait_state(accepted, "finished", "failed", timeout_s=120) == "finished"
    assert (await editor.command("recap.accept", {"session": accepted}))["applied"] is True
    use_model(scribble)
    rejected = await editor.run("tidy the notes")
    assert await editor.wait_state(rejected, "finished", "failed", timeout_s=120) == "finished"
    await editor.command("recap.reject", {"session": rejected, "reason": "not asked"})
    await editor.wait_for(lambda: editor.session_events(rejected, "verdict"), timeout_s=60)
    logs = {s: read_session(sessions / f"{s}.jsonl") for s in (accepted, rejected)}
    assert [(log.start.source, log.start.adapter_id, [v.verdict for v in log.of_type(Verdict)])
            for log in logs.values()] == [("lsp", None, ["accepted"]), ("lsp", None, ["rejected"])]
    assert "a/calc.py" in logs[accepted].final.diff and "a/notes.txt" in logs[rejected].final.diff

    # 2. `recap train` on those session files: one step, both sessions, a group of 2 each
    cfg = TrainConfig(sessions_dir=str(sessions), model="tiny", out_dir=str(run), steps=1, group_size=2,
                      sessions_per_step=2, max_episode_steps=1, max_new_tokens=8, max_context_tokens=1600)
    adapter = await asyncio.to_thread(train, cfg)
    assert adapter == run / "adapter" and (adapter / "adapter_config.json").is_file()
    rollouts = [read_session(p).start for p in sorted((run / "rollouts" / "step-000001").glob("*.jsonl"))]
    assert sorted(r.meta["from_session"] for r in rollouts) == sorted([accepted, accepted, rejected, rejected])
    assert all(r.base_commit == logs[accepted].start.base_commit for r in rollouts)  # the logged start states
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["rollout/episodes"] == 4.0

    # 3. the same running server picks the new adapter for its next session
    use_model("tiny", maxSteps=1, maxNewTokens=16)
    after = await editor.run("say something")
    assert await editor.wait_state(after, "finished", "failed", timeout_s=300) == "finished"
    statuses = {s["session"]: s for s in (await editor.command("recap.status"))["sessions"]}
    assert [statuses[s].get("adapter") for s in (accepted, rejected, after)] == [None, None, "adapter"]
    start = read_session(sessions / f"{after}.jsonl").start
    assert (start.model, start.adapter_id) == ("tiny", "adapter")
