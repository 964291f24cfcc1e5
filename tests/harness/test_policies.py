"""TransformersPolicy on the tiny random model: exact ids and logprobs, seeding, the grammar
constraint, KV-cache reuse against a full re-encode, and spec parsing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from harness.errors import ConfigError, PolicyError
from harness.policies import SPEC_FORMS, load_policy
from harness.policies.chat_format import ChatFormat
from harness.policies.kv_cache import PrefixCache, weights_key
from harness.types import Policy, assistant_message, tool_message

TOOLS = [
    {"type": "function", "function": {"name": "set_mode", "description": "Set the mode.", "parameters": {
        "type": "object", "properties": {"mode": {"enum": ["fast", "safe"]}, "verbose": {"type": "boolean"}},
        "required": ["mode", "verbose"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "finish", "description": "End the task.", "parameters": {
        "type": "object", "properties": {}, "additionalProperties": False}}},
]
MESSAGES = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Pick a mode."}]


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", seed=3, temperature=1.0)


def with_config(policy, **changes):
    policy.config = dataclasses.replace(policy.config, **changes)
    policy.reset_cache()
    return policy


def full_logits(policy, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return policy.model(input_ids=torch.tensor([ids])).logits[0].float()


def test_completion_records_exact_ids_and_sampling_logprobs(tiny):
    policy = with_config(tiny, constrain=False, temperature=0.8)
    assert isinstance(policy, Policy)
    c = policy.generate(MESSAGES, TOOLS, max_new_tokens=12)
    assert list(c.prompt_ids) == policy.chat.encode(MESSAGES, TOOLS)
    assert c.prompt_tokens == len(c.prompt_ids) == policy.count_tokens(MESSAGES, TOOLS)
    assert c.completion_tokens == len(c.completion_ids) == len(c.logprobs) > 0
    assert not c.constrained and c.encoded_tokens == c.prompt_tokens
    # re-score the sampled tokens with one full forward: same log-probabilities at temperature 0.8
    ids = list(c.prompt_ids) + list(c.completion_ids)
    logits = full_logits(policy, ids)[len(c.prompt_ids) - 1 : len(ids) - 1]
    expected = torch.log_softmax(logits / 0.8, -1)[torch.arange(len(c.completion_ids)), torch.tensor(c.completion_ids)]
    torch.testing.assert_close(torch.tensor(c.logprobs), expected, atol=1e-4, rtol=1e-4)


def test_same_seed_same_completion_and_reseed(tiny):
    policy = with_config(tiny, constrain=False)
    policy.reseed(11)
    first = policy.generate(MESSAGES, None, max_new_tokens=8)
    policy.reseed(11)
    policy.reset_cache()
    again = policy.generate(MESSAGES, None, max_new_tokens=8)
    other = policy.generate(MESSAGES, None, max_new_tokens=8)
    assert first.completion_ids == again.completion_ids
    assert other.completion_ids != first.completion_ids


def test_constrained_turn_is_one_valid_call_scored_under_the_mask(tiny):
    policy = with_config(tiny, constrain=True, temperature=1.0)
    c = policy.generate(MESSAGES, TOOLS, max_new_tokens=80)
    assert c.constrained and c.finish_reason == "stop" and not c.parse_errors
    assert len(c.tool_calls) == 1 and c.tool_calls[0].name in {"set_mode", "finish"}
    assert c.text.startswith("<tool_call>\n{") and c.text.endswith("}\n</tool_call>")
    # re-scoring under the replayed masks gives back the recorded logprobs
    masks = policy.constrained_masks(TOOLS, c.completion_ids)
    ids = list(c.prompt_ids) + list(c.completion_ids)
    logits = full_logits(policy, ids)[len(c.prompt_ids) - 1 : len(ids) - 1].masked_fill(~masks, float("-inf"))
    expected = torch.log_softmax(logits, -1)[torch.arange(len(c.completion_ids)), torch.tensor(c.completion_ids)]
    torch.testing.assert_close(torch.tensor(c.logprobs), expected, atol=1e-4, rtol=1e-4)
    # the unconstrained distribution gives those tokens less mass
    free = torch.log_softmax(full_logits(policy, ids)[len(c.prompt_ids) - 1 : len(ids) - 1], -1)
    assert free[torch.arange(len(c.completion_ids)), torch.tensor(c.completion_ids)].sum() < expected.sum()


def test_summary_turn_is_plain_text_without_tools_or_constraint(tiny):
    policy = with_config(tiny, constrain=True)
    c = policy.generate(MESSAGES, TOOLS, max_new_tokens=6, kind="summary")
    assert not c.constrained and c.tool_calls == ()
    assert list(c.prompt_ids) == policy.chat.encode(MESSAGES, None)
    assert "<tools>" not in policy.tokenizer.decode(c.prompt_ids)


def test_length_cut_and_window_guard():
    policy = load_policy("tiny", context_window=512)
    assert policy.context_window == 512
    long = [{"role": "user", "content": "word " * 600}]
    with pytest.raises(PolicyError, match="window"):
        policy.generate(long, None, max_new_tokens=4)
    policy = with_config(policy, constrain=True)
    c = policy.generate([{"role": "user", "content": "hi"}], TOOLS, max_new_tokens=3)
    # no call fits in 3 tokens: the turn is cut, and the cut call is a parse error, not an exception
    assert (c.completion_tokens, c.finish_reason) == (3, "length")
    assert not c.tool_calls and c.parse_errors


def test_hf_folder_and_lora_adapter_round_trip(tiny, tmp_path):
    from peft import LoraConfig, get_peft_model

    tiny.model.save_pretrained(tmp_path / "model")
    tiny.tokenizer.save_pretrained(tmp_path / "model")
    lora = get_peft_model(load_policy("tiny", seed=3).model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)  # a trained adapter (B starts at zero)
    lora.save_pretrained(tmp_path / "adapter")

    base = load_policy(f"hf:{tmp_path / 'model'}", temperature=0)
    adapted = load_policy(f"hf:{tmp_path / 'model'}", temperature=0, adapter=str(tmp_path / "adapter"))
    ids = base.chat.encode(MESSAGES, None)
    assert not torch.allclose(full_logits(base, ids), full_logits(adapted, ids))
    adapted.generate(MESSAGES, None, max_new_tokens=2)
    adapted.unload_adapter()
    torch.testing.assert_close(full_logits(adapted, ids), full_logits(base, ids))
    after = adapted.generate(MESSAGES, None, max_new_tokens=2)
    assert after.encoded_tokens == after.prompt_tokens  # the adapter's cache was not reused


def test_kv_reuse_matches_a_full_reencode_and_encodes_only_the_suffix(tiny):
    reuse = with_config(tiny, constrain=True, reuse_kv_cache=True, temperature=1.0)
    reuse.reseed(5)
    first = reuse.generate(MESSAGES, TOOLS, max_new_tokens=80)
    history = MESSAGES + [assistant_message(first.text, first.tool_calls),
                          tool_message(first.tool_calls[0].id, first.tool_calls[0].name, "mode set")]
    second = reuse.generate(history, TOOLS, max_new_tokens=80)
    assert first.encoded_tokens == first.prompt_tokens
    assert second.encoded_tokens < second.prompt_tokens - first.prompt_tokens // 2

    fresh = load_policy("tiny", seed=3, temperature=1.0, constrain=True)
    with_config(fresh, reuse_kv_cache=False).reseed(5)
    a = fresh.generate(MESSAGES, TOOLS, max_new_tokens=80)
    b = fresh.generate(history, TOOLS, max_new_tokens=80)
    assert (a.completion_ids, b.completion_ids) == (first.completion_ids, second.completion_ids)
    assert b.encoded_tokens == b.prompt_tokens
    torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(second.logprobs), atol=1e-4, rtol=1e-4)


def test_prefix_cache_logits_equal_full_encode_after_extension_and_after_a_rewrite(tiny):
    from transformers import DynamicCache

    model = tiny.model
    chat = ChatFormat(tiny.tokenizer)
    old = chat.encode(MESSAGES + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}], None)
    extended = chat.encode(MESSAGES + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"},
                                       {"role": "assistant", "content": "done"}, {"role": "user", "content": "next?"}], None)
    rewritten = chat.encode([MESSAGES[0], {"role": "user", "content": "Summary: mode was picked."}], None)
    cache = PrefixCache()
    with torch.no_grad():
        for new in (extended, rewritten):
            past = DynamicCache(config=model.config)
            past = model(input_ids=torch.tensor([old]), cache=past, use_cache=True).cache
            cache.store(past, old, weights_key(model))
            past, start = cache.take(new, weights_key(model))
            assert 0 < start < len(new) and new[:start] == old[:start]
            logits = model(input_ids=torch.tensor([new[start:]]), cache=past, use_cache=True).logits[0]
            torch.testing.assert_close(logits, full_logits(tiny, new)[start:], atol=1e-4, rtol=1e-4)


def test_changed_weights_or_rewritten_history_rebuild_the_cache(tiny):
    policy = with_config(tiny, constrain=False, reuse_kv_cache=True)
    policy.generate(MESSAGES, None, max_new_tokens=4)
    again = policy.generate(MESSAGES, None, max_new_tokens=4)
    assert again.encoded_tokens == 1  # identical prompt: only its last token is run again
    with torch.no_grad():
        next(policy.model.parameters()).add_(0.0)  # an in-place update (as an optimizer step would)
    after_step = policy.generate(MESSAGES, None, max_new_tokens=4)
    assert after_step.encoded_tokens == after_step.prompt_tokens
    rewritten = [{"role": "user", "content": "A completely different conversation."}]
    c = policy.generate(rewritten, None, max_new_tokens=4)
    shared = 0
    while after_step.prompt_ids[shared] == c.prompt_ids[shared]:
        shared += 1
    assert c.encoded_tokens == c.prompt_tokens - shared


def test_chat_format_spells_out_tools_calls_and_responses_for_plain_chatml(tiny):
    chat = tiny.chat
    assert not chat.native_tools and not chat.native_tool_calls
    call = {"id": "call_0_0", "type": "function", "function": {"name": "finish", "arguments": {}}}
    messages = MESSAGES + [{"role": "assistant", "content": "", "tool_calls": [call]},
                           tool_message("call_0_0", "finish", "bye")]
    text = chat.render(messages, TOOLS)
    assert text.count("<tools>\n") == 1 and '"name": "set_mode"' in text
    assert '<tool_call>\n{"name":"finish","arguments":{}}\n</tool_call>' in text
    assert "<tool_response>\nbye\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    # content that already carries the markup (a local model's Completion.text) is not doubled
    echoed = MESSAGES + [assistant_message('<tool_call>\n{"name":"finish","arguments":{}}\n</tool_call>',
                                           ())]
    assert chat.render(echoed, None).count("<tool_call>\n{") == 1


def test_unknown_and_bad_specs_raise_config_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_policy("gpt-5")
    assert all(form in str(info.value) for form in SPEC_FORMS)
    for bad in ("hf:", "openai:", "scripted:"):
        with pytest.raises(ConfigError, match="valid forms"):
            load_policy(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_policy(f"hf:{tmp_path / 'missing'}")
    with pytest.raises(ConfigError, match="not found"):
        load_policy(f"hf:{tmp_path / 'missing.gguf'}")
    with pytest.raises(ConfigError, match="local models only"):
        load_policy("openai:m@http://127.0.0.1:1/v1", constrain=True)
    with pytest.raises(ConfigError, match="adapter"):
        load_policy("tiny", adapter=str(tmp_path))
    with pytest.raises(ConfigError, match="temperature"):
        load_policy("tiny", temperature=-1)


def test_importing_policies_loads_no_heavy_library():
    code = ("import sys, harness.policies; heavy = {'torch', 'transformers', 'xgrammar', 'openai'} & set(sys.modules);"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sample_token_top_p_and_mask_renormalize():
    from harness.policies.transformers_policy import sample_token

    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    gen = torch.Generator().manual_seed(0)
    draws = [sample_token(logits, temperature=1.0, top_p=0.7, allowed=None, generator=gen) for _ in range(200)]
    assert {t for t, _ in draws} == {0, 1}  # the nucleus of mass 0.7 is the top two tokens
    lp = dict(draws)
    assert lp[0] == pytest.approx(torch.log(torch.tensor(0.5 / 0.8)).item(), abs=1e-6)
    allowed = torch.tensor([False, True, True, False])
    masked = dict(sample_token(logits, temperature=1.0, top_p=1.0, allowed=allowed, generator=gen) for _ in range(100))
    assert set(masked) == {1, 2} and masked[2] == pytest.approx(torch.log(torch.tensor(0.15 / 0.45)).item(), abs=1e-6)
    token, greedy_lp = sample_token(logits, temperature=0.0, top_p=1.0, allowed=allowed, generator=gen)
    assert token == 1 and greedy_lp == pytest.approx(torch.log(torch.tensor(0.3 / 0.45)).item(), abs=1e-6)


def test_chat_format_hands_tools_to_a_template_that_renders_them(tiny):
    import copy

    tokenizer = copy.deepcopy(tiny.tokenizer)
    tokenizer.chat_template = (
        "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
        "{% for m in messages %}[{{ m.role }}]{{ m.content or '' }}"
        "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }}{% endfor %}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    chat = ChatFormat(tokenizer)
    assert chat.native_tools and chat.native_tool_calls
    call = {"id": "c1", "type": "function", "function": {"name": "finish", "arguments": {}}}
    text = chat.render(MESSAGES + [{"role": "assistant", "content": "", "tool_calls": [call]},
                                   tool_message("c1", "finish", "bye")], TOOLS)
    # (HF renders templates with trim_blocks: the newline after a block tag is dropped)
    assert text.startswith("TOOLS:set_mode;finish;[system]") and "<tools>" not in text
    assert text.endswith("[assistant]CALL finish[tool]bye[assistant]") and "<tool_response>" not in text
