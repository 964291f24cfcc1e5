"""Tool calls written as text, parsed in the formats open-weight model families use, and rendered
in the one recap's own local models write (Hermes / Qwen 2.5 tags).

Formats read (the name is `ParsedText.format`, recorded in the session's `policy_turn`):

    hermes        <tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>
                  (Hermes, Qwen 2/2.5/3, many fine-tunes; the closing tag may be missing at the end)
    xml_function  <function=read_file><parameter=path>a.py</parameter></function>, with or without
                  a <tool_call> opener (Qwen3-Coder); <function=read_file>{"path": "a.py"}</function>
                  (Llama 3.1 custom tool format, Functionary)
    mistral       [TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]read_file[ARGS]{...}
    llama3_json   <|python_tag|>{"name": ..., "parameters": {...}} (several separated by ";")
    deepseek      <｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file ```json {...}```<｜tool▁call▁end｜>
                  (DeepSeek V3 / R1; the V3.1 form without "function" and fences too)
    bare_json     the whole reply (or a ```json fence) is {"name": ..., "arguments": {...}} or a list
                  of them (qwen2.5-coder on Ollama, Llama 3.x JSON tool calling)
    pythonic      [read_file(path="a.py"), grep(pattern="x")] (Llama 3.2/4, Gemma's pythonic format)

No maintained stand-alone parser library covers these (vLLM's tool parsers are the reference, but
they need vLLM and a tokenizer), so they are read here, one small function per format.

Threat model: the text comes from the model and is untrusted. Parsing never evaluates it: JSON via
`json`, pythonic calls via `ast.parse` and `ast.literal_eval` of keyword values (literals only; any
other expression is an error). Problems are returned, not raised: the agent loop turns them into
error observations the policy can read.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness.types import ToolCall, tool_call_id

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)\s*>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
_DEEPSEEK = re.compile(
    r"<｜tool▁call▁begin｜>(?:function)?<｜tool▁sep｜>\s*([^\s`{]+)\s*(?:```(?:json)?\s*(.*?)\s*```|(\{.*?\}))\s*"
    r"(?:<｜tool▁call▁end｜>|\Z)", re.DOTALL)
_DEEPSEEK_WRAP = re.compile(r"<｜tool▁calls▁begin｜>.*?(?:<｜tool▁calls▁end｜>|\Z)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass
class ParsedText:
    """What `parse_text_calls` found.

    Attributes:
        content: the text without the call markup.
        calls: the calls, `arguments` as JSON text (the registry reports argument problems itself).
        errors: one readable problem per call that could not be read (quoting its start).
        format: the format seen (a name from the module docstring), None when there were no calls.
    """

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    format: str | None = None

    def add(self, turn: int, name: Any, arguments: Any, source: str) -> None:
        if not isinstance(name, str) or not name:
            self.errors.append(f'tool call must have a string "name": {source[:200]!r}')
            return
        try:
            args = arguments if isinstance(arguments, str) else json.dumps({} if arguments is None else arguments,
                                                                            ensure_ascii=False)
        except (ValueError, RecursionError):  # nested too deeply to write back
            self.errors.append(f"arguments of {name!r} are nested too deeply: {source[:200]!r}")
            return
        # lone surrogates (a JSON escape like "\ud800") kept as their escape: sessions are UTF-8
        self.calls.append(ToolCall(id=tool_call_id(turn, len(self.calls) + len(self.errors)),
                                   name=escape_surrogates(name), arguments=escape_surrogates(args)))

    def add_json(self, turn: int, body: str) -> None:
        """One `{"name", "arguments"|"parameters"}` object (or a list of them) given as JSON text."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            self.errors.append(f"tool call is not valid JSON ({_why(exc)}): {body[:200]!r}")
            return
        for item in data if isinstance(data, list) else [data]:
            if not isinstance(item, dict):
                self.errors.append(f'tool call must be an object with a string "name": {body[:200]!r}')
                continue
            self.add(turn, item.get("name"), item.get("arguments", item.get("parameters", {})), body)


def _why(exc: Exception) -> str:
    """What was wrong with a JSON text, for the model: json's own message (it names the line,
    column and char), or the limit a valid-looking text ran into."""
    if isinstance(exc, json.JSONDecodeError):
        return str(exc)
    return "a number too long or nesting too deep"


def _xml_value(raw: str) -> Any:
    """A `<parameter>` value: JSON when it reads as an object, array, number or boolean, else the text."""
    value = raw.strip("\n")
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return decoded if not isinstance(decoded, str) else value


def _xml_function(text: str, turn: int, out: ParsedText) -> str:
    for match in _FUNCTION.finditer(text):
        name, body = match.group(1), match.group(2)
        params = _PARAMETER.findall(body)
        if params:
            out.add(turn, name, {k: _xml_value(v) for k, v in params}, match.group(0))
        elif body.strip().startswith("{"):
            try:
                args = json.loads(body.strip())
            except (ValueError, RecursionError) as exc:
                out.errors.append(f"arguments of <function={name}> are not valid JSON ({_why(exc)}): {body[:200]!r}")
                continue
            out.add(turn, name, args, match.group(0))
        else:
            out.add(turn, name, {}, match.group(0))
    return _FUNCTION.sub("", text)


def _hermes(text: str, turn: int, out: ParsedText) -> str | None:
    if OPEN not in text:
        return None
    xml = False
    for match in _BLOCK.finditer(text):
        body = match.group(1).strip()
        if body.startswith("<function="):
            xml = True
            _xml_function(body, turn, out)
        else:
            out.add_json(turn, body)
    out.format = "xml_function" if xml else "hermes"
    return _BLOCK.sub("", text)


def _function_tags(text: str, turn: int, out: ParsedText) -> str | None:
    if "<function=" not in text:
        return None
    out.format = "xml_function"
    return _xml_function(text, turn, out)


def _mistral(text: str, turn: int, out: ParsedText) -> str | None:
    head, marker, rest = text.partition("[TOOL_CALLS]")
    if not marker:
        return None
    out.format = "mistral"
    for part in rest.split("[TOOL_CALLS]"):
        part = part.strip()
        if part.startswith("["):
            out.add_json(turn, part)
            continue
        name, sep, args = part.partition("[ARGS]")
        if not sep:
            brace = part.find("{")
            name, args = (part[:brace], part[brace:]) if brace >= 0 else (part, "{}")
        try:
            out.add(turn, name.strip(), json.loads(args or "{}"), part)
        except (ValueError, RecursionError) as exc:
            out.errors.append(f"arguments of {name.strip()!r} are not valid JSON ({_why(exc)}): {args[:200]!r}")
    return head


def _llama3_json(text: str, turn: int, out: ParsedText) -> str | None:
    head, marker, rest = text.partition("<|python_tag|>")
    if not marker:
        return None
    out.format = "llama3_json"
    rest = rest.replace("<|eom_id|>", "").replace("<|eot_id|>", "")
    for part in (p.strip() for p in rest.split(";")):
        if part:
            out.add_json(turn, part)
    return head


def _deepseek(text: str, turn: int, out: ParsedText) -> str | None:
    if "<｜tool▁call▁begin｜>" not in text:
        return None
    out.format = "deepseek"
    for match in _DEEPSEEK.finditer(text):
        name, fenced, inline = match.groups()
        body = fenced if fenced is not None else inline
        try:
            out.add(turn, name, json.loads(body), match.group(0))
        except (ValueError, RecursionError) as exc:
            out.errors.append(f"arguments of {name!r} are not valid JSON ({_why(exc)}): {body[:200]!r}")
    return _DEEPSEEK_WRAP.sub("", _DEEPSEEK.sub("", text))


def _bare_json(text: str, turn: int, out: ParsedText) -> str | None:
    body = text.strip()
    fenced = _FENCE.match(body)
    body = fenced.group(1) if fenced else body
    if not body.startswith(("{", "[")):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str)
                            and set(i) <= {"name", "arguments", "parameters", "id", "type"} for i in items):
        return None  # JSON, but not a call: leave it as the model's text
    out.format = "bare_json"
    for item in items:
        out.add(turn, item["name"], item.get("arguments", item.get("parameters", {})), body)
    return ""


def _pythonic(text: str, turn: int, out: ParsedText) -> str | None:
    body = text.strip()
    if not (body.startswith("[") and body.endswith(")]")):
        return None
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(tree, ast.List) or not tree.elts or not all(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Name) for c in tree.elts):
        return None
    out.format = "pythonic"
    for call in tree.elts:
        name = call.func.id  # type: ignore[attr-defined]
        try:
            if call.args:
                raise ValueError("positional arguments are not allowed")
            args = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
        except ValueError:
            out.errors.append(f"arguments of {name}(...) must be keyword arguments with literal values: "
                              f"{ast.unparse(call)[:200]!r}")
            continue
        out.add(turn, name, args, ast.unparse(call))
    return ""


_READERS: tuple[Callable[[str, int, ParsedText], str | None], ...] = (
    _hermes, _function_tags, _mistral, _llama3_json, _deepseek, _bare_json, _pythonic,
)


def parse_text_calls(text: str, *, turn: int) -> ParsedText:
    """Read the tool calls written as text in `text`, in the first format (module docstring) whose
    markup it holds; plain prose gives no calls, no errors and `format` None.

    Args:
        text: the decoded completion.
        turn: the policy turn number, for deterministic call ids (`call_<turn>_<i>`).
    """
    out = ParsedText(content=text.strip())
    for reader in _READERS:
        rest = reader(text, turn, out)
        if rest is not None:
            out.content = rest.strip()
            break
    return out


def parse_tool_calls(text: str, *, turn: int) -> tuple[str, list[ToolCall], list[str]]:
    """`parse_text_calls` as a (content without the call markup, calls, errors) triple."""
    parsed = parse_text_calls(text, turn=turn)
    return parsed.content, parsed.calls, parsed.errors


def escape_surrogates(text: str) -> str:
    """`text` with each lone surrogate written as its `\\udXXX` escape, so that it can be encoded
    as UTF-8 (session files, prompts). A model writes one as a JSON escape (`"\\ud800"`), which
    `json.loads` turns into the code point; inside JSON text the escape reads back the same."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def render_tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    """One call in the Hermes markup (compact JSON), the format recap's local models write."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            pass
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False, separators=(",", ":"))
    return f"{OPEN}\n{body}\n{CLOSE}"


def render_tool_calls(calls: Sequence[ToolCall]) -> str:
    return "\n".join(render_tool_call(c.name, c.arguments) for c in calls)
