"""Batched generation on the tiny model: `TransformersPolicy.generate_batch` against one-by-one
`generate`, constrained batched turns, and `BatchingPolicy` serving several threads in one batch."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
import torch
from test_policies import TOOLS

from harness.errors import ConfigError, PolicyError
from harness.policies import load_policy
from harness.policies.batching import BatchingPolicy
from harness.policies.transformers_policy import GenerationRequest


def conversation(n: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Pick a mode. " * n}]


def tiny(**config):
    policy = load_policy("tiny", seed=3)
    policy.config = dataclasses.replace(policy.config, **config)
    return policy


def count_forwards(policy) -> list[int]:
    calls = [0]
    policy.model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_batch_of_different_lengths_equals_one_by_one_greedy():
    policy = tiny(temperature=0.0, constrain=False, reuse_kv_cache=False)
    lengths, budgets = (1, 9, 40, 3), (12, 5, 12, 8)
    single = [policy.generate(conversation(n), None, max_new_tokens=b) for n, b in zip(lengths, budgets)]
    calls = count_forwards(policy)
    batch = policy.generate_batch([GenerationRequest(conversation(n), None, b) for n, b in zip(lengths, budgets)])
    assert len({len(c.prompt_ids) for c in single}) == 4  # really different prompt lengths (left padding)
    for one, many in zip(single, batch):
        assert many.prompt_ids == one.prompt_ids
        assert many.completion_ids == one.completion_ids
        assert many.finish_reason == one.finish_reason
        assert many.encoded_tokens == many.prompt_tokens == len(one.prompt_ids)  # no KV reuse in batch mode
        torch.testing.assert_close(torch.tensor(many.logprobs), torch.tensor(one.logprobs), atol=1e-4, rtol=1e-4)
    assert calls[0] == max(budgets)  # one forward per step for all live sequences, none per sequence


def test_sampled_batch_logprobs_are_those_of_the_sampling_distribution():
    policy = tiny(temperature=0.8, constrain=False, reuse_kv_cache=False)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    batch = policy.generate_batch([GenerationRequest(conversation(n), None, 6, generator=g) for n, g in zip((2, 7), gens)])
    for c in batch:
        ids = list(c.prompt_ids + c.completion_ids)
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([ids])).logits[0].float()
        expected = torch.log_softmax(logits[len(c.prompt_ids) - 1:-1] / 0.8, dim=-1)
        expected = expected.gather(1, torch.tensor(c.completion_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(c.logprobs), expected, atol=1e-4, rtol=1e-4)
    # each sequence follows its own generator: the same seed alone gives the same tokens
    again = policy.generate_batch([GenerationRequest(conversation(2), None, 6, generator=torch.Generator().manual_seed(1))])
    assert again[0].completion_ids == batch[0].completion_ids


def test_constrained_batched_turns_are_valid_calls_scored_under_their_masks():
    policy = tiny(temperature=1.0, constrain=True, reuse_kv_cache=False)
    requests = [GenerationRequest(conversation(n), TOOLS, 200, generator=torch.Generator().manual_seed(n)) for n in (1, 5, 12)]
    requests.append(GenerationRequest(conversation(3), TOOLS, 60, kind="summary"))
    *actions, summary = policy.generate_batch(requests)
    for c in actions:
        assert c.constrained and c.finish_reason == "stop" and not c.parse_errors
        assert len(c.tool_calls) == 1 and c.tool_calls[0].name in {"set_mode", "finish"}
        masks = policy.constrained_masks(TOOLS, c.completion_ids)
        assert all(masks[i, t] for i, t in enumerate(c.completion_ids))
    assert not summary.constrained and not summary.tool_calls


def test_a_request_that_cannot_run_gets_its_error_and_the_others_run():
    policy = load_policy("tiny", seed=3, context_window=64)
    ok, too_long = policy.generate_batch([
        GenerationRequest(conversation(1), None, 4), GenerationRequest(conversation(40), None, 4),
    ])
    assert ok.completion_tokens == 4
    assert isinstance(too_long, PolicyError) and "no room" in str(too_long)


def test_batching_policy_serves_threads_in_one_batch_per_round():
    policy = tiny(temperature=1.0, constrain=True)
    batcher = BatchingPolicy(policy)
    calls = count_forwards(policy)
    lanes = [batcher.lane(seed) for seed in range(3)]
    results: dict[int, list] = {}

    def episode(i: int) -> None:
        with lanes[i] as lane:
            # episodes of different lengths: lane i asks i + 1 turns, then leaves the group
            results[i] = [lane.generate(conversation(i + 1), TOOLS, max_new_tokens=120) for _ in range(i + 1)]

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert [len(results[i]) for i in range(3)] == [1, 2, 3]
    assert batcher.requests == 6 and batcher.batches == 3  # rounds of 3, 2 and 1 turns
    for turns in results.values():
        for c in turns:
            assert len(c.tool_calls) == 1 and isinstance(json.loads(c.tool_calls[0].arguments), dict)
    assert calls[0] <= 3 * 120
    assert lanes[0].count_tokens(conversation(1), TOOLS) == len(results[0][0].prompt_ids)
    with pytest.raises(RuntimeError):
        lanes[0].generate(conversation(1), None, max_new_tokens=4)


def test_batching_policy_needs_a_batched_policy():
    from harness.policies.scripted import ScriptedPolicy

    with pytest.raises(ConfigError):
        BatchingPolicy(ScriptedPolicy([]))
    with pytest.raises(ConfigError):
        BatchingPolicy(tiny(), wait_s=-1)
