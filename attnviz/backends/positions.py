"""Position information: what each model adds to say where a token is, and how attention depends on offset.

``position_info(model)`` reads a loaded backend (built-in or Hugging Face) and returns a ``PositionInfo``;
the other functions are plain numpy over tables and traces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.weights import Weights
from ..nn import SinusoidalPositions, TransformerConfig, sinusoidal_encoding

KINDS = ("learned", "sinusoidal", "rotary", "relative", "none")
METRICS = ("dot", "cosine")
POSITION_TABLES = ("position_embeddings", "wpe", "embed_positions")  # module names of learned or fixed tables


@dataclass(frozen=True)
class PositionInfo:
    """What a model uses for position, with the arrays worth showing."""

    kind: str  # one of KINDS
    table: np.ndarray | None  # (P, D) one vector per position; "relative": (K, H) bias per offset and head
    frequencies: np.ndarray | None  # angular frequency of each (sin, cos) or rotated pair of dimensions
    note: str  # one or two sentences for a person
    offsets: np.ndarray | None = None  # "relative": the key − query offset of each table row


def sinusoidal(T: int, D: int) -> np.ndarray:
    """(T, D) sinusoidal encoding of Vaswani et al. (2017) as numpy."""
    if T < 1 or D < 1:
        raise ValueError(f"the encoding needs at least one position and one dimension, got {T} × {D}")
    return sinusoidal_encoding(T, D).numpy()


def sinusoidal_frequencies(D: int) -> np.ndarray:
    """(ceil(D/2),) ωᵢ = 10000^(−2i/D): the angle per position of dimensions 2i (sin) and 2i+1 (cos)."""
    return 10000.0 ** (-np.arange(0, D, 2) / D)


def rotary_frequencies(d_rot: int, base: float) -> np.ndarray:
    """(d_rot/2,) θᵢ = base^(−2i/d_rot): the rotation per position of pair i (Su et al. 2021)."""
    return base ** (-np.arange(0, d_rot, 2, dtype=np.float64) / d_rot)


def similarity(table: np.ndarray, metric: str = "dot") -> np.ndarray:
    """(P, P) dot products or cosines between position vectors (rows of ``table`` (P, D))."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
    t = np.asarray(table, np.float64)
    if metric == "cosine":
        t = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    return (t @ t.T).astype(np.float32)


def attention_by_offset(attentions, keep=None, causal: bool = False):
    """Mean attention weight at each offset key − query, per layer and head.

    ``attentions`` (L, H, T, T): an array, or a trace's ``Weights`` (read one head at a time); ``keep`` (T,) bool
    limits the mean to query–key pairs of kept tokens (e.g. not special). Returns (offsets (K,), means (L, H, K));
    NaN where no pair is kept; ``causal`` keeps offsets ≤ 0 only, the only ones a decoder can attend to.
    """
    if isinstance(attentions, Weights):
        head, (L, H, T, _) = attentions.head, attentions.shape
    else:  # an array as it is (float64 stays float64)
        a = np.asarray(attentions)
        head, (L, H, T, _) = (lambda l, h: a[l, h]), a.shape
    q, k = np.indices((T, T))
    bins = (k - q).ravel() + T - 1  # 0 … 2T−2
    pairs = np.ones(T * T) if keep is None else (np.outer(keep, keep)).ravel().astype(np.float64)
    counts = np.bincount(bins, weights=pairs, minlength=2 * T - 1)  # (K,)
    sums = np.stack([np.bincount(bins, weights=np.asarray(head(l, h), np.float64).ravel() * pairs,
                                 minlength=2 * T - 1) for l in range(L) for h in range(H)])  # (L·H, K)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / counts, np.nan).reshape(L, H, -1)  # (L, H, K)
    offsets = np.arange(-(T - 1), T)
    if causal:
        return offsets[:T], means[..., :T]
    return offsets, means


def position_info(model) -> PositionInfo:
    """The position information of a loaded backend: built-in (``.net`` from attnviz.nn) or Hugging Face."""
    net = getattr(model, "net", model)
    if isinstance(getattr(net, "config", None), TransformerConfig):
        return _builtin(net)
    return _hf(net)


def _builtin(net) -> PositionInfo:
    # EncoderModel has .embeddings; TextClassifier and Translator keep theirs in .encoder.
    emb = net.embeddings if hasattr(net, "embeddings") else net.encoder.embeddings
    table = emb.positions.table.detach().float().cpu().numpy()  # (P, D)
    P, D = table.shape
    if isinstance(emb.positions, SinusoidalPositions):
        return PositionInfo(
            "sinusoidal", table, sinusoidal_frequencies(D),
            f"A fixed sinusoidal encoding for {P} positions × {D} dimensions is added to the token embeddings "
            "(Vaswani et al. 2017, §3.5); nothing about position is learned.",
        )  # fmt: skip
    return PositionInfo(
        "learned", table, None,
        f"{P} trained position vectors of width {D} are added to the token embeddings, as in BERT.",
    )  # fmt: skip


def _hf(net) -> PositionInfo:
    config = net.config
    name = getattr(config, "model_type", type(net).__name__)
    modules = list(net.named_modules())
    rotary = next((m for _, m in modules if isinstance(getattr(m, "inv_freq", None), torch.Tensor)), None)
    if rotary is not None:
        return _rotary(config, rotary, name)
    relative = (m for _, m in modules if isinstance(getattr(m, "relative_attention_bias", None), torch.nn.Embedding))
    if (bias := next(relative, None)) is not None:
        return _relative(bias, name)
    for path, m in modules:
        if isinstance(m, torch.nn.Embedding) and path.rsplit(".", 1)[-1] in POSITION_TABLES:
            return _table(config, path, m, name)
    return PositionInfo(
        "none", None, None,
        f"attnviz found no position table, rotary frequencies or relative position bias in this {name} model.",
    )  # fmt: skip


def _rotary(config, module, name: str) -> PositionInfo:
    rope = getattr(config, "rope_parameters", None) or {}
    base = rope.get("rope_theta", getattr(config, "rope_theta", None))
    heads = config.num_attention_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    d_rot = int(d_head * rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)))
    note = (
        f"{name} has no position vector to show: rotary embeddings (Su et al. 2021) rotate each pair of "
        f"query and key dimensions by p·θᵢ before the dot product, so a score depends on the offset between "
        f"two tokens, not on where they are. θᵢ = base^(−2i/d) with base {base:g} and d = {d_rot} "
        "rotated dimensions per head."
    )
    if base is None or rope.get("rope_type", "default") != "default":
        # Scaled variants (linear, dynamic, llama3, yarn …) rewrite the frequencies: show the model's own.
        kind = rope.get("rope_type", "unknown")
        note = f"{name} uses rotary embeddings ({kind} rope); the frequencies are the model's own, after scaling."
        return PositionInfo("rotary", None, module.inv_freq.detach().double().cpu().numpy(), note)
    return PositionInfo("rotary", None, rotary_frequencies(d_rot, float(base)), note)


def _relative(attn, name: str) -> PositionInfo:
    K = attn.relative_attention_max_distance
    offsets = np.arange(-K, K + 1)
    buckets = attn._relative_position_bucket(
        torch.as_tensor(offsets),
        bidirectional=not attn.is_decoder,
        num_buckets=attn.relative_attention_num_buckets,
        max_distance=K,
    )
    with torch.no_grad():
        table = attn.relative_attention_bias(buckets.to(attn.relative_attention_bias.weight.device))  # (K, H)
    n = attn.relative_attention_num_buckets
    note = (
        f"{name} has no position vectors: each head adds a learned bias to every attention score, looked up "
        f"by the offset key − query in one of {n} buckets (exact for small offsets, logarithmic up to ±{K}, "
        "the same beyond). The first layer's bias is shared by all layers."
    )
    return PositionInfo("relative", table.float().cpu().numpy(), None, note, offsets)


def _table(config, path: str, emb, name: str) -> PositionInfo:
    # RoBERTa's positions start after its padding index; BART's embedding keeps an offset of 2.
    start = getattr(emb, "offset", None)
    if not isinstance(start, int):
        start = emb.padding_idx + 1 if emb.padding_idx is not None else 0
    table = emb.weight.detach().float().cpu().numpy()[start:]  # (P, D)
    P, D = table.shape
    skipped = f" (rows 0–{start - 1} of the table are never used by real positions)" if start else ""
    if "Sinusoidal" in type(emb).__name__ or getattr(config, "sinusoidal_pos_embds", False):
        layout = "interleaved sines and cosines"
        if "Marian" in type(emb).__name__:
            layout = "sines in the first half of the dimensions, cosines in the second"
        return PositionInfo(
            "sinusoidal", table, sinusoidal_frequencies(D),
            f"{name} adds a fixed sinusoidal table ({path}: {P} positions × {D}, {layout}) to the token embeddings.",
        )  # fmt: skip
    return PositionInfo(
        "learned", table, None,
        f"{name} adds {P} learned position vectors of width {D} ({path}) to the token embeddings{skipped}.",
    )  # fmt: skip
