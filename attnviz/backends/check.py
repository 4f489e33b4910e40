"""How exact a Hugging Face model's trace is: its weights against the same model's own eager attention.

A model is checked when it loads (``gap`` between its captured and its eager trace of CHECK_TEXT, within
TOLERANCE for its dtype, or it runs eager), and ``models --check`` gives each family its support-matrix row
(``Check``, from ``against_eager``: every head of a user's trace against a second copy loaded eager, outputs on).
Kept apart from the backend so what "exact" means is stated once, beside its tolerances.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..core.trace import stacks
from .common import encode, stacked
from .hub import AUTO

# The captured weights must equal eager attention's within this, per dtype, on the check text, or the model runs
# eager. Half-precision eager rounds its weights to the dtype (bf16 keeps 8 bits) and its earlier layers round
# differently from SDPA's.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
CHECK_TEXT = ("The quick brown fox jumps over the lazy dog; then the dog, waking slowly, chases the fox around "
              "the old red barn and back.")
CHECK_TARGET = "A fox runs from a dog around the barn."


@dataclass(frozen=True)
class Check:
    """One model's row of the support matrix: how attnviz traces it and how far that is from eager attention."""

    family: str
    path: str  # "interface", "eager" (a visible fallback) or "refused"
    gap: float | None  # the largest difference from the model's own eager weights, over every head
    dtype: str
    reason: str = ""  # a refusal's message

    @property
    def exact(self) -> bool:
        return self.path == "refused" or (self.gap is not None and self.gap <= TOLERANCE[getattr(torch, self.dtype)])

    def row(self) -> str:
        gap = "—" if self.gap is None else f"{self.gap:.1e}"
        return f"| {self.family} | {self.path} | {self.dtype} | {gap} | {self.reason} |"


def gap(captured, eager) -> float:
    """The largest difference between two traces' weights over every stack (inf where their shapes differ)."""
    gaps = []
    for name, side in stacks(eager).items():
        mine = stacks(captured).get(name)
        if mine is None or mine.weights.shape != side.weights.shape:
            return float("inf")
        gaps.append(float(np.abs(mine.weights.dense() - side.weights.dense()).max()))
    return max(gaps)


def against_eager(backend, trace, source: Path, family: str, text: str, target: str) -> Check:
    """The row of ``backend`` (loaded from ``source``, a folder or a GGUF file), whose ``trace`` of ``text``
    (and ``target``) is compared, head by head, with the same weights loaded eager, outputs on."""
    import transformers as tf

    dtype = str(backend.net.dtype).removeprefix("torch.")
    if source.is_file():  # a GGUF file: the same dequantised weights in the model's own class, run eager
        ref = type(backend.net)(copy.deepcopy(backend.net.config))  # its own config: the switch below is the config's
        ref.load_state_dict(backend.net.state_dict())
        ref.set_attn_implementation("eager")
        ref = ref.to(backend.net.dtype).eval()
    else:
        ref = getattr(tf, AUTO[backend.kind]).from_pretrained(source, attn_implementation="eager",
                                                                dtype=backend.net.dtype, use_safetensors=True,
                                                                trust_remote_code=False).eval()
    ids = encode(backend.tokenizer, text, backend.max_tokens).ids
    inputs = dict(input_ids=torch.tensor([ids]))  # (1, T)
    if backend.kind == "encoder-decoder":
        tgt = [backend.start_id, *encode(backend.tokenizer, target, backend.max_tokens - 1).ids]
        inputs["decoder_input_ids"] = torch.tensor([tgt])  # (1, Tt)
    with torch.inference_mode():
        extra = {} if backend.kind == "encoder" else {"use_cache": False}
        out = ref(**inputs, **extra, output_attentions=True)
    if backend.kind == "encoder-decoder":
        want = {side: out.get(f"{side}_attentions") for side in ("encoder", "decoder", "cross")}
    else:
        want = {"self": out.get("attentions")}
    gaps = []
    for side, got in stacks(trace).items():
        mine = got.weights.dense()
        ref_w = want.get(side)
        if not ref_w or any(a is None for a in ref_w) or stacked(ref_w).shape != mine.shape:
            return Check(family, trace.capture, None, dtype, f"no eager {side} weights of the same shape to compare")
        gaps.append(float(np.abs(mine - stacked(ref_w)).max()))
    return Check(family, trace.capture, max(gaps), dtype)
