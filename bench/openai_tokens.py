"""recap's prompt token counts against a served model's own `usage.prompt_tokens`.

    python -m bench.openai_tokens                       # starts llama.cpp's server on the embedded GGUF
    python -m bench.openai_tokens --url http://127.0.0.1:8000/v1 --model NAME

For each prompt kind (code, prose, a line-numbered file read, with and without the tool specs)
prints recap's count for each counter it can build (the estimate and the server's tokenizer as
they are before any calibration, the server's tokenizer, the model's tokenizer when the GGUF is local) and the ratio
to the server's count. A ratio >= 1 is what the window guarantee needs; the estimate is built to
err high, and calibration after the first turn lifts any ratio below 1 to 1.05.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.policies.openai_policy import OpenAIPolicy, OpenAIPolicyConfig
from harness.tools import default_registry

ROOT = Path(__file__).resolve().parents[1]


def prompts() -> dict[str, list[dict[str, str]]]:
    code = (ROOT / "harness" / "context.py").read_text()[:6000]
    prose = (ROOT / "README.md").read_text()[:6000]
    numbered = "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(code.splitlines(), 1))
    system = {"role": "system", "content": "You are a coding agent."}
    return {kind: [system, {"role": "user", "content": text}] for kind, text in
            (("code", code), ("prose", prose), ("numbered read", numbered))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an OpenAI-compatible API base; default: start llama.cpp's server")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parser.parse_args()
    server = None
    if args.url is None:
        from tests.llamacpp_server import LlamaServer

        server = LlamaServer(n_ctx=args.n_ctx, model_alias=args.model)
    url = args.url or server.url
    try:
        counters = {"estimate": OpenAIPolicyConfig(model=args.model, base_url=url, probe=False),
                    "server tokenizer": OpenAIPolicyConfig(model=args.model, base_url=url)}
        if server is not None:
            from harness.policies.loading import embedded_gguf

            folder, name = embedded_gguf()
            counters["GGUF tokenizer"] = OpenAIPolicyConfig(model=args.model, base_url=url, tokenizer_path=f"{folder}/{name}")
        policies = {name: OpenAIPolicy(config=cfg) for name, cfg in counters.items()}
        specs = default_registry().specs()
        print(f"{'prompt':<26} {'server':>7}  " + "  ".join(f"{n:>22}" for n in policies))
        sender = OpenAIPolicy(config=OpenAIPolicyConfig(model=args.model, base_url=url, probe=False,
                                                        context_window=args.n_ctx))  # its calibration stays its own
        for kind, messages in prompts().items():
            for tools in (None, specs):
                counts = {n: p.count_tokens(messages, tools) for n, p in policies.items()}  # never calibrated here
                real = sender.generate(messages, tools, max_new_tokens=1).prompt_tokens
                label = kind + (" + tools" if tools else "")
                print(f"{label:<26} {real:>7}  " + "  ".join(f"{c:>12} ({c / real:4.2f}x)" for c in counts.values()))
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
