"""The tool-call grammar on the real embedded tokenizer: what it admits, what it refuses, and the
mask replay RL uses to re-score constrained turns."""

from __future__ import annotations

import json
from typing import Literal

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from harness.errors import ConfigError
from harness.policies.grammar import ToolCallGrammar, replay_masks, tool_union_schema
from harness.policies.loading import embedded_tokenizer
from harness.toolcall import parse_tool_calls, render_tool_call


class Range(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: int
    end: int


class ReadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    lines: Range | None = None


class SetMode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["fast", "safe"]
    verbose: bool


class Finish(BaseModel):
    model_config = ConfigDict(extra="forbid")


def spec(name: str, params: type[BaseModel]) -> dict:
    return {"type": "function", "function": {"name": name, "description": name, "parameters": params.model_json_schema()}}


TOOLS = [spec("read_file", ReadFile), spec("set_mode", SetMode), spec("finish", Finish)]


@pytest.fixture(scope="module")
def tokenizer():
    return embedded_tokenizer()


@pytest.fixture(scope="module")
def grammar(tokenizer):
    return ToolCallGrammar(tokenizer)


def ids_of(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def test_union_schema_inlines_pydantic_refs():
    schema = tool_union_schema(TOOLS)
    read = schema["anyOf"][0]
    assert read["properties"]["name"] == {"const": "read_file"}
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text
    lines = read["properties"]["arguments"]["properties"]["lines"]
    assert any(opt.get("properties", {}).get("start") == {"type": "integer", "title": "Start"} for opt in lines["anyOf"])
    with pytest.raises(ConfigError):
        tool_union_schema([])


@pytest.mark.parametrize(
    "name,args",
    [("read_file", {"path": "src/app.py"}), ("read_file", {"path": "a b.py", "lines": {"start": 1, "end": 20}}),
     ("set_mode", {"mode": "safe", "verbose": False}), ("finish", {})],
)
def test_valid_calls_are_admitted_and_end_with_the_stop_token(tokenizer, grammar, name, args):
    ids = ids_of(tokenizer, render_tool_call(name, args))
    masks = replay_masks(tokenizer, TOOLS, ids, grammar=grammar)
    assert masks.shape == (len(ids), len(tokenizer)) and masks.dtype == torch.bool
    assert masks[torch.arange(len(ids)), torch.tensor(ids)].all()
    # after the closing tag only the stop token is allowed
    assert masks[-1].sum() == 1 and masks[-1, tokenizer.eos_token_id]
    # special tokens other than the stop token never are
    assert not masks[:, [0, 1]].any()


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name":"delete_all","arguments":{}}\n</tool_call>',  # not an offered tool
        '<tool_call>\n{"name": "finish","arguments":{}}\n</tool_call>',  # whitespace is not compact
        '<tool_call>\n{"name":"set_mode","arguments":{"mode":"slow","verbose":true}}\n</tool_call>',  # enum
        '<tool_call>\n{"name":"read_file","arguments":{"paths":"x"}}\n</tool_call>',  # unknown key
        'Sure! <tool_call>\n{"name":"finish","arguments":{}}\n</tool_call>',  # text before the call
    ],
)
def test_invalid_calls_are_refused(tokenizer, grammar, text):
    with pytest.raises(ValueError, match="not allowed"):
        replay_masks(tokenizer, TOOLS, ids_of(tokenizer, text), grammar=grammar)


def test_random_walk_under_the_masks_always_yields_a_valid_call(tokenizer, grammar):
    """Sampling anything the masks allow (random logits) ends in one well-formed, valid call."""
    tools = [spec("set_mode", SetMode), spec("finish", Finish)]
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        masker = grammar.masker(tools)
        ids: list[int] = []
        while not masker.terminated and len(ids) < 200:
            allowed = masker.allowed()
            logits = torch.randn(len(tokenizer), generator=gen).masked_fill(~allowed, float("-inf"))
            token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
            masker.accept(token)
            ids.append(token)
        assert masker.terminated and ids[-1] == tokenizer.eos_token_id
        _, calls, errors = parse_tool_calls(tokenizer.decode(ids[:-1]), turn=0)
        assert not errors and len(calls) == 1
        params = {"set_mode": SetMode, "finish": Finish}[calls[0].name]
        params.model_validate_json(calls[0].arguments)
