"""A killed-and-resumed run ends in the same state as an uninterrupted one (fixed seeds, tiny model).

Rollouts come from the fake OpenAI-compatible server (deterministic per sampling seed, with a
reward spread inside each group), so every step has real gradients on the tiny model's adapter.
"""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from harness.errors import ConfigError
from rl.checkpoint import latest_checkpoint
from rl.rewards import RewardConfig
from rl.train import TrainConfig, train


class Killed(Exception):
    pass


def _cfg(sessions, out, url):
    return TrainConfig(
        sessions_dir=str(sessions), model="tiny", out_dir=str(out), steps=3, group_size=2, max_episode_steps=2,
        max_new_tokens=32, learning_rate=1e-2, rollout_endpoint=url, save_rollouts=False, seed=3,
        rewards=RewardConfig(overlong="ignore"),
    )


def _metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_resume_gives_the_same_final_state(task_sessions, tmp_path, fake_vllm):
    full = tmp_path / "full"
    train(_cfg(task_sessions, full, fake_vllm.url))

    cut = tmp_path / "cut"

    def kill_after_first(step, values):
        if step == 1:
            raise Killed

    with pytest.raises(Killed):
        train(_cfg(task_sessions, cut, fake_vllm.url), on_step=kill_after_first)
    assert latest_checkpoint(cut).name == "step-000001"
    assert not (cut / "adapter").exists()
    # a run killed for memory resumes with another micro-batch and without activation checkpointing:
    # neither changes the maths
    train(dataclasses.replace(_cfg(task_sessions, cut, fake_vllm.url), micro_batch_turns=3,
                              activation_checkpointing=False), resume=True)

    a = load_file(str(full / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(cut / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    # the adapter did learn (LoRA B starts at zero)
    assert any(v.abs().sum() > 0 for k, v in a.items() if "lora_B" in k)
    # same data, same losses at every step
    fm, cm = _metrics(full), _metrics(cut)
    assert [m["step"] for m in cm] == [1, 2, 3]
    for x, y in zip(fm, cm):
        assert x["loss/tokens"] == y["loss/tokens"]
        assert x["rollout/reward_mean"] == y["rollout/reward_mean"]
        assert x.get("loss/loss") == pytest.approx(y.get("loss/loss"), abs=1e-6)
    assert any(m["loss/tokens"] > 0 for m in fm)
    full_state = torch.load(latest_checkpoint(full) / "state.pt", weights_only=False)
    cut_state = torch.load(latest_checkpoint(cut) / "state.pt", weights_only=False)
    assert full_state["cursor"] == cut_state["cursor"] and full_state["step"] == cut_state["step"] == 3
    assert full_state["scheduler"] == cut_state["scheduler"]
    # a setting that changes the maths does block --resume, and the error names it
    with pytest.raises(ConfigError, match="learning_rate differ"):
        train(dataclasses.replace(_cfg(task_sessions, cut, fake_vllm.url), learning_rate=0.5, steps=4), resume=True)


def test_resume_refuses_a_missing_checkpoint_or_a_changed_config(task_sessions, tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint"):
        train(TrainConfig(sessions_dir=str(task_sessions), model="tiny", out_dir=str(tmp_path / "none")), resume=True)
