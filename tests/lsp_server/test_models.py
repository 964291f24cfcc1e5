"""Real models through the server: a LoRA adapter swap between sessions (the `tiny` random model)
and one session of the embedded SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.session import read_session


def make_adapter(folder: Path, *, seed: int) -> None:
    """A random (non-zero) LoRA adapter for the `tiny` policy's model, saved the way peft does."""
    import torch
    from peft import LoraConfig, get_peft_model

    from harness.policies.loading import build_tiny

    model, _ = build_tiny(seed=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                                init_lora_weights=False))
    lora.save_pretrained(str(folder))


async def test_a_newer_adapter_is_loaded_for_the_next_session_only(start_editor, repo: Path, tmp_path: Path) -> None:
    adapters = tmp_path / "adapters"
    make_adapter(adapters / "step-1", seed=1)
    editor = await start_editor(repo, model="tiny", maxSteps=1, maxNewTokens=16, adapterDir=str(adapters))

    first = await editor.run("say something")
    await editor.wait_for(lambda: editor.session_events(first, "session_start"), timeout_s=120)
    make_adapter(adapters / "step-2", seed=2)  # appears mid-session: not for this one
    assert await editor.wait_state(first, "finished", "failed", timeout_s=300) == "finished"
    second = await editor.run("say something")
    assert await editor.wait_state(second, "finished", "failed", timeout_s=300) == "finished"

    statuses = (await editor.command("recap.status"))["sessions"]
    assert [s["adapter"] for s in statuses] == ["step-1", "step-2"]
    logs = [read_session(tmp_path / "sessions" / f"{s}.jsonl") for s in (first, second)]
    assert [log.start.adapter_id for log in logs] == ["step-1", "step-2"]
    assert [log.start.model for log in logs] == ["tiny", "tiny"]
    # both sessions start from a fresh policy with the same sampling seed: only the adapter differs
    texts = [editor.session_events(s, "policy_turn")[0]["text"] for s in (first, second)]
    assert texts[0] != texts[1]


@pytest.mark.embedded
async def test_the_embedded_model_runs_a_session_through_the_server(start_editor, repo: Path, tmp_path: Path) -> None:
    editor = await start_editor(repo, model="embedded", maxSteps=2)
    editor.open("calc.py")
    session = await editor.run("Fix the bug in add: it must return a + b.", uri=editor.uri("calc.py"))
    assert await editor.wait_state(session, "finished", "failed", timeout_s=900) == "finished"

    turns = editor.session_events(session, "policy_turn")
    assert 1 <= len(turns) <= 2
    assert all(t["constrained"] and t["tool_calls"] for t in turns)  # the grammar makes every turn a call
    log = read_session(tmp_path / "sessions" / f"{session}.jsonl")
    assert log.start.model == "embedded" and log.final.steps == len(turns)
    reports = editor.client.progress_reports[f"recap-{session}"]
    assert len(reports) == len(turns) + 2  # begin, one report per step, end
    proposal = await editor.command("recap.proposal", {"session": session})
    assert proposal["diff"] == log.final.diff


def test_the_policy_cache_shares_a_model_and_keeps_only_the_newest_adapter(tmp_path: Path) -> None:
    from lsp_server.policies import PolicyCache, SerializedPolicy

    make_adapter(tmp_path / "a1", seed=1)
    make_adapter(tmp_path / "a2", seed=2)
    cache = PolicyCache()
    get = lambda spec, adapter=None: cache.get(spec, endpoint=None, api_key=None, adapter=adapter)  # noqa: E731
    base = get("tiny")
    assert isinstance(base, SerializedPolicy) and get("tiny") is base
    one = get("tiny", tmp_path / "a1")
    assert one is not base and get("tiny", tmp_path / "a1") is one
    two = get("tiny", tmp_path / "a2")
    assert get("tiny", tmp_path / "a2") is two
    assert get("tiny", tmp_path / "a1") is not one  # dropped when a2 was loaded
    remote = get("openai:some-model@http://127.0.0.1:9/v1")
    assert get("openai:some-model@http://127.0.0.1:9/v1") is remote and not isinstance(remote, SerializedPolicy)
    (tmp_path / "s.json").write_text("[]")
    assert get(f"scripted:{tmp_path / 's.json'}") is not get(f"scripted:{tmp_path / 's.json'}")
