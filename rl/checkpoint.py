"""Checkpoints: everything a killed run needs to continue exactly.

    OUT/checkpoints/step-000004/
        adapter/            the LoRA adapter (peft `save_pretrained`: adapter_config.json + weights)
        state.pt            optimizer, scheduler, RNG states (python, numpy, torch), step, data cursor,
                            the resolved training config
    OUT/checkpoints/latest  the name of the newest complete checkpoint

A checkpoint is written to a temporary folder and renamed into place, and `latest` is replaced
atomically after it, so a crash mid-write leaves the previous checkpoint as the latest.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(out_dir: str | Path, *, step: int, model: Any, state: dict[str, Any]) -> Path:
    """Write checkpoint `step` (adapter + `state` + RNG states) and point `latest` at it.

    Args:
        out_dir: the run folder.
        step: optimizer steps done.
        model: the peft model (its adapter is saved).
        state: picklable trainer state (optimizer/scheduler state dicts, cursor, config, ...).
    Returns:
        The checkpoint folder.
    """
    import torch

    root = Path(out_dir) / "checkpoints"
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp / "adapter"))
    torch.save({**state, "step": step, "rng": rng_state()}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    pointer = root / ".latest.tmp"
    pointer.write_text(final.name + "\n", encoding="utf-8")
    os.replace(pointer, root / "latest")
    return final


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    pointer = Path(out_dir) / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    folder = pointer.parent / pointer.read_text(encoding="utf-8").strip()
    return folder if (folder / "state.pt").is_file() else None


def load_checkpoint(folder: str | Path, *, model: Any) -> dict[str, Any]:
    """Load the adapter weights of `folder` into `model` (a peft model with the same LoRA config)
    and return the saved state (RNG states are NOT applied: call `set_rng_state(state["rng"])`)."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter = Path(folder) / "adapter"
    weights = adapter / "adapter_model.safetensors"
    set_peft_model_state_dict(model, load_file(str(weights)))
    return torch.load(Path(folder) / "state.pt", weights_only=False)
