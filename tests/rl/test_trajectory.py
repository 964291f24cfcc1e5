"""Loss masks on a hand-built trajectory with two self-summaries."""

import pytest
import torch

from harness.session import Final, Observation, PolicyTurn, SessionStart, SessionWriter, Summary, UserMessage
from rl.trajectory import build_batch, trajectory_from_events


def _hand_built_session():
    w = SessionWriter(None)
    w.emit(SessionStart, schema_version=1, session_id="s", repo="/r", task="fix it", model="tiny")
    w.emit(UserMessage, content="fix it")

    def turn(n, kind, segment, prompt, completion):
        w.emit(
            PolicyTurn, turn=n, kind=kind, segment=segment, text="x", prompt_ids=prompt,
            completion_ids=completion, logprobs=[-0.1 * (i + 1) for i in range(len(completion))],
            constrained=kind == "action", offered_tools=["read_file", "finish"] if kind == "action" else [],
        )

    turn(0, "action", 0, [1, 2, 3], [10, 11])
    w.emit(Observation, turn=0, obs_id=1, call_id="c0", name="read_file", arguments="{}", output="tool output")
    turn(1, "summary", 0, [1, 2, 3, 10, 11, 50, 51], [20, 21, 22])  # 50, 51: tool output tokens
    w.emit(Summary, index=1, turn=1, text="sum1", replaces_through_seq=4, tokens_before=9, tokens_after=5)
    turn(2, "action", 1, [1, 2, 20, 21, 22], [12])
    w.emit(PolicyTurn, turn=3, kind="action", segment=1, text="no ids")  # an untrainable turn
    turn(4, "summary", 1, [1, 2, 20, 21, 22, 12, 52], [23, 24])
    w.emit(Summary, index=2, turn=4, text="sum2", replaces_through_seq=9, tokens_before=8, tokens_after=4)
    turn(5, "action", 2, [1, 2, 23, 24], [13, 14, 15])
    w.emit(Final, stop_reason="finish", diff="", steps=6, summaries=2)
    return w.events


def test_every_sampled_token_and_only_those_get_gradient():
    traj = trajectory_from_events(_hand_built_session())
    assert [t.kind for t in traj.turns] == ["action", "summary", "action", "summary", "action"]
    assert [t.segment for t in traj.turns] == [0, 0, 1, 1, 2]
    assert traj.segments == 3 and traj.untrainable_turns == 1 and traj.sampled_tokens == 11

    batch = build_batch(traj.turns, [0.5] * 5, pad_id=0)
    assert batch.input_ids.shape == (5, 10)
    trained = [
        [int(tok) for tok, m in zip(row, mask) if m == 1.0] for row, mask in zip(batch.input_ids, batch.loss_mask)
    ]
    # exactly the completions: the two actions before the first summary, the summaries themselves,
    # and the actions after them; no prompt token (task, earlier turns, tool output 50-52,
    # summaries quoted back in later prompts) and no padding
    assert trained == [[10, 11], [20, 21, 22], [12], [23, 24], [13, 14, 15]]
    expected_mask = torch.tensor(
        [
            [0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 1, 1, 1],
            [0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 1, 1, 0],
            [0, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        ],
        dtype=torch.float32,
    )
    assert torch.equal(batch.loss_mask, expected_mask)
    assert torch.equal(batch.attention_mask.sum(1), torch.tensor([5, 10, 6, 9, 7]))
    # old logprobs sit on the sampled tokens only
    assert torch.allclose(batch.old_logprobs[1, 7:10], torch.tensor([-0.1, -0.2, -0.3]))
    assert float(batch.old_logprobs[batch.loss_mask == 0].abs().sum()) == 0.0
    # every segment, summaries included, carries the episode's advantage
    assert torch.equal(batch.advantages, torch.full((5,), 0.5))
    assert batch.prompt_lengths.tolist() == [3, 7, 5, 7, 4]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        build_batch([], [], pad_id=0)
    traj = trajectory_from_events(_hand_built_session())
    with pytest.raises(ValueError, match="advantages"):
        build_batch(traj.turns, [1.0], pad_id=0)
    w = SessionWriter(None)
    w.emit(PolicyTurn, turn=0, text="", prompt_ids=[1], completion_ids=[2, 3], logprobs=[-1.0])
    with pytest.raises(ValueError, match="logprobs"):
        trajectory_from_events(w.events)
