"""Grammar-constrained tool calls for local models, with xgrammar (runs on CPU).

A constrained action turn is forced into exactly one valid call of one offered tool:

    <tool_call>\\n{"name":"<tool>","arguments":{...}}\\n</tool_call><EOS>

where the JSON is compact (no whitespace) and matches the union schema
`anyOf[{"name": {"const": tool}, "arguments": <tool's parameters schema>}]`. At each step the
matcher gives the set of allowed next tokens; the sampler masks every other token out and
renormalizes, so logprobs are those of the constrained distribution. Special tokens other than the
stop token are always masked (xgrammar would let the empty-text `<|endoftext|>` through).

For RL, `replay_masks` replays the matcher over sampled completion ids and returns the same
per-position masks, so that a trainer re-scores constrained turns under the masks they were
sampled with (the importance ratio then compares like with like).

Reference: Dong et al., "XGrammar: Flexible and Efficient Structured Generation Engine for Large
Language Models" (2024).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Sequence

from harness.errors import ConfigError

_OPEN_EBNF = 'root ::= "<tool_call>\\n"'
_CLOSE_EBNF = 'root ::= "\\n</tool_call>"'


def _inline_refs(schema: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """Replace local `$ref: #/$defs/X` by the definition (pydantic nests models that way), so that
    each tool's parameters stand alone inside the union. Recursive models are refused."""
    if depth > 32:
        raise ConfigError("tool parameters schema is recursive or nested too deep for a grammar")
    if isinstance(schema, dict):
        if "$ref" in schema and isinstance(schema["$ref"], str):
            name = schema["$ref"].rsplit("/", 1)[-1]
            if name not in defs:
                raise ConfigError(f"tool parameters schema has an unresolvable $ref {schema['$ref']!r}")
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return _inline_refs({**defs[name], **rest}, defs, depth + 1)
        return {k: _inline_refs(v, defs, depth + 1) for k, v in schema.items() if k not in ("$defs", "definitions")}
    if isinstance(schema, list):
        return [_inline_refs(v, defs, depth + 1) for v in schema]
    return schema


def tool_union_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The JSON Schema of one call of any offered tool.

    Args:
        tools: OpenAI function specs (`{"type": "function", "function": {name, parameters}}`).
    Returns:
        `{"anyOf": [{"type": "object", "properties": {"name": {"const": N}, "arguments": P},
        "required": ["name", "arguments"], "additionalProperties": false}, ...]}`.
    Raises:
        ConfigError: no tools, or a spec without a name.
    """
    if not tools:
        raise ConfigError("a tool-call grammar needs at least one offered tool")
    cases = []
    for spec in tools:
        fn = spec.get("function", spec)
        if not isinstance(fn.get("name"), str):
            raise ConfigError(f"tool spec without a name: {json.dumps(spec)[:200]}")
        params = copy.deepcopy(fn.get("parameters") or {"type": "object", "properties": {}})
        defs = {**params.get("definitions", {}), **params.get("$defs", {})}
        cases.append({
            "type": "object",
            "properties": {"name": {"const": fn["name"]}, "arguments": _inline_refs(params, defs)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })
    return {"anyOf": cases}


class ToolCallGrammar:
    """Compiles tool-call grammars for one tokenizer and hands out matchers.

    Args:
        tokenizer: the Hugging Face tokenizer the model samples with.
        vocab_size: the model's logits width (>= len(tokenizer); defaults to len(tokenizer)).
        stop_ids: the token ids that end a turn (default: the tokenizer's EOS).
    """

    def __init__(self, tokenizer: Any, *, vocab_size: int | None = None, stop_ids: Sequence[int] | None = None) -> None:
        import xgrammar as xgr

        self.vocab_size = vocab_size or len(tokenizer)
        self.stop_ids = list(stop_ids) if stop_ids else [tokenizer.eos_token_id]
        self._info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_ids
        )
        self._compiler = xgr.GrammarCompiler(self._info)
        self._banned = sorted(set(tokenizer.all_special_ids) - set(self.stop_ids))
        self._compiled: dict[str, Any] = {}

    def compile(self, tools: Sequence[dict[str, Any]]) -> Any:
        """The compiled grammar for these tools (cached by their JSON)."""
        import xgrammar as xgr

        key = json.dumps(list(tools), sort_keys=True)
        if key not in self._compiled:
            body = xgr.Grammar.from_json_schema(
                tool_union_schema(tools), any_whitespace=False, separators=(",", ":"), strict_mode=True
            )
            grammar = xgr.Grammar.concat(xgr.Grammar.from_ebnf(_OPEN_EBNF), body, xgr.Grammar.from_ebnf(_CLOSE_EBNF))
            self._compiled[key] = self._compiler.compile_grammar(grammar)
        return self._compiled[key]

    def masker(self, tools: Sequence[dict[str, Any]]) -> "TokenMasker":
        """A fresh per-turn masker for one constrained completion."""
        return TokenMasker(self, self.compile(tools))


class TokenMasker:
    """Steps one grammar matcher along a completion.

    Call `allowed()` for the mask of the next position, then `accept(token)` with the sampled token.
    """

    def __init__(self, grammar: ToolCallGrammar, compiled: Any) -> None:
        import xgrammar as xgr

        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, grammar.vocab_size)
        self._grammar = grammar

    def allowed(self) -> Any:
        """Bool tensor (V,): True for the tokens the grammar allows next."""
        import torch
        import xgrammar as xgr

        self._matcher.fill_next_token_bitmask(self._bitmask)
        probe = torch.zeros(1, self._grammar.vocab_size)
        xgr.apply_token_bitmask_inplace(probe, self._bitmask)
        mask = probe[0] == 0
        mask[self._grammar._banned] = False
        return mask

    def accept(self, token: int) -> None:
        """Advance the matcher. Raises ValueError for a token the grammar refuses."""
        if not self._matcher.accept_token(int(token)):
            raise ValueError(f"token {token} is not allowed by the tool-call grammar here")

    @property
    def terminated(self) -> bool:
        """The stop token was accepted: the call is complete."""
        return self._matcher.is_terminated()


def replay_masks(
    tokenizer: Any,
    tools: Sequence[dict[str, Any]],
    completion_ids: Sequence[int],
    *,
    vocab_size: int | None = None,
    stop_ids: Sequence[int] | None = None,
    grammar: ToolCallGrammar | None = None,
) -> Any:
    """The allowed-token masks a constrained turn was sampled under, rebuilt by replaying the matcher.

    Args:
        tokenizer: the tokenizer of the policy that sampled the turn.
        tools: the tool specs offered at that turn (same order and content).
        completion_ids: the sampled ids, shape (C,), stop token included when it was sampled.
        vocab_size: logits width V (defaults to len(tokenizer)).
        stop_ids: the stop token ids the policy used (`TransformersPolicy.stop_ids`; default EOS).
        grammar: a `ToolCallGrammar` to reuse (saves building the tokenizer info again).
    Returns:
        torch.bool tensor (C, V); row i is the mask in force when token i was sampled.
    Raises:
        ValueError: a sampled token that the grammar does not allow (the turn was not sampled
            under this constraint).
    """
    import torch

    grammar = grammar or ToolCallGrammar(tokenizer, vocab_size=vocab_size, stop_ids=stop_ids)
    masker = grammar.masker(tools)
    rows = []
    for token in completion_ids:
        rows.append(masker.allowed())
        masker.accept(token)
    if not rows:
        return torch.zeros(0, grammar.vocab_size, dtype=torch.bool)
    return torch.stack(rows)
