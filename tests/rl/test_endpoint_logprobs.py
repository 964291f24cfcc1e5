"""Issue 12, fault 5: turns sampled through `--rollout-endpoint` carry the server's own token ids,
or are kept out of training; never logprobs re-attached to a re-tokenization of the text."""

from __future__ import annotations

import pytest
from fake_openai import FakeServer, reply

from rl.distributed import TokenizedEndpointPolicy

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "say hello"}]


@pytest.fixture
def server():
    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def chat():
    from harness.policies.chat_format import ChatFormat
    from harness.policies.loading import embedded_tokenizer

    return ChatFormat(embedded_tokenizer())


def logprob_reply(text: str, tokens: list[str], logprobs: list[float]) -> dict:
    body = reply({"content": text})
    body["choices"][0]["logprobs"] = {"content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                                                  for t, lp in zip(tokens, logprobs)]}
    return body


def endpoint(server, chat, *, temperature=0.8):
    stop = chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return TokenizedEndpointPolicy(base_url=server.url, model="m", chat=chat, stop_id=stop, temperature=temperature, seed=1)


def test_ids_come_from_the_server_not_from_re_tokenizing(server, chat):
    # "Hello world" sampled as H + ello + " world", no logprob for the stop token: re-tokenizing gives
    # Hello, " world", <|im_end|> - three tokens too, on which the old code put the three logprobs
    hello = chat.tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    assert len(hello) + 1 == 3
    h, ello, world = (chat.tokenizer.convert_tokens_to_ids(t) for t in ("H", "ello", "Ġworld"))
    server.replies = [(200, logprob_reply("Hello world", [f"token_id:{h}", f"token_id:{ello}", f"token_id:{world}"], [-1.0, -0.5, -0.25])),
                      (200, logprob_reply("Hello world", ["H", "ello", " world"], [-1.0, -0.5, -0.25]))]
    policy = endpoint(server, chat)
    named = policy.generate(MESSAGES, None, max_new_tokens=16)
    assert named.completion_ids == (h, ello, world) and named.logprobs == (-1.0, -0.5, -0.25)
    assert named.prompt_ids == tuple(chat.encode(MESSAGES, None))
    assert server.requests[0]["return_tokens_as_token_ids"] is True

    unnamed = policy.generate(MESSAGES, None, max_new_tokens=16)  # a server that gives no ids
    assert unnamed.logprobs is None and unnamed.completion_ids is None and unnamed.text == "Hello world"


def test_sampling_temperature_is_the_learners(server, chat):
    from rl.train import TrainConfig

    assert "temperature" in {f for f in TrainConfig.__dataclass_fields__}
    server.replies = [(200, logprob_reply("x", ["token_id:87"], [-0.1]))]
    endpoint(server, chat, temperature=0.6).generate(MESSAGES, None, max_new_tokens=4)
    sent = server.requests[0]
    assert (sent["temperature"], sent["top_p"]) == (0.6, 1.0)  # the learner divides logits by the same 0.6


def test_untrainable_turns_are_counted(tmp_path):
    from harness.session import PolicyTurn, SessionStart
    from rl.trajectory import trajectory_from_events

    start = SessionStart(seq=0, ts=0.0, schema_version=1, session_id="s", source="task", repo="/r", task="t", model="m")
    ok = PolicyTurn(seq=1, ts=0.0, turn=0, text="a", prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.1])
    dropped = PolicyTurn(seq=2, ts=0.0, turn=1, text="b", prompt_ids=[1, 2], completion_ids=None, logprobs=None)
    trajectory = trajectory_from_events([start, ok, dropped])
    assert (len(trajectory.turns), trajectory.untrainable_turns) == (1, 1)
