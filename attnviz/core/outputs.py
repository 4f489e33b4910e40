"""A trace of attention weights a model already returned: what bertviz users pass (Hugging Face
``outputs.attentions``, a tuple of (1, H, T, T) tensors per layer, and the tokens).

The weights are held dense (``DenseWeights``, capture "dense"): they are given, not recomputed, so a
trace of them is exactly what the model returned. One constructor builds every trace (``AttentionTrace``).
"""

from __future__ import annotations

import numpy as np

from .. import settings
from .trace import AttentionTrace, Seq2SeqTrace
from .weights import given_weights

SPECIALS = ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]", "<s>", "</s>", "<pad>", "<unk>", "<mask>",
            "<|endoftext|>", "<bos>", "<eos>")


def stacked(attention, what: str = "attention") -> np.ndarray:
    """(L, H, Tq, Tk) float32 from a tuple of per-layer (1, H, Tq, Tk) tensors or arrays (or one such array),
    checked as a file's weights are (``given_weights``): within ATTNVIZ_MAX_DENSE_MB, finite, rows summing to 1."""
    if isinstance(attention, (tuple, list)) and len(attention) == 0:
        raise ValueError(
            f"{what} is an empty tuple. Most likely it is outputs[-1] of an encoder (bertviz's README code): under "
            "transformers 5 that is its cross_attentions, empty since an encoder has no decoder. Pass "
            "outputs.attentions (or outputs itself). If outputs.attentions is empty too, the model ran with SDPA or "
            "flash attention, which return no weights: load it with attn_implementation=\"eager\"")
    if attention is None:
        raise ValueError(
            f"{what} holds no weights: run the model with output_attentions=True, loaded with "
            "attn_implementation=\"eager\" (SDPA and flash attention return none)")
    layers = attention if isinstance(attention, (tuple, list)) else [attention[i] for i in range(len(attention))]
    heads = []
    for i, a in enumerate(layers):
        if not hasattr(a, "shape"):  # nested lists: already in memory, as Python numbers
            a = np.asarray(a)
        if a.ndim == 4 and a.shape[0] != 1:
            raise ValueError(f"{what}[{i}] holds a batch of {a.shape[0]} texts: pass one text (batch size 1)")
        if a.ndim == 4:
            a = a[0]  # (H, Tq, Tk), a view: nothing is copied before the size is checked
        if a.ndim != 3:
            raise ValueError(f"{what}[{i}] must be (1, heads, queries, keys), got shape {tuple(a.shape)}")
        heads.append(a)
    shapes = {tuple(a.shape) for a in heads}
    if len(shapes) != 1:
        raise ValueError(f"every layer of {what} must have the same shape, got {sorted(shapes)}")
    return given_weights(heads, what, settings.max_dense_mb(),  # (L, H, Tq, Tk)
                         "give fewer layers or tokens, trace the text with attnviz.trace(text, model) (heads "
                         "computed on demand), or raise ATTNVIZ_MAX_DENSE_MB")


def is_causal(attn: np.ndarray) -> bool:
    """True when no query gives any weight to a later key, in every head (a decoder's self-attention)."""
    T = attn.shape[-1]
    return attn.shape[-2] == T and T > 1 and not np.triu(np.abs(attn).max((0, 1)), 1).any()


def _trace(tokens, attn: np.ndarray, model: str, kind: str | None) -> AttentionTrace:
    tokens = [str(t) for t in tokens]
    special = np.array([t in SPECIALS for t in tokens])
    kind = kind or ("decoder" if is_causal(attn) else "encoder")
    return AttentionTrace(tokens, attn, special=special, model=model, kind=kind, capture="dense")


def model_attentions(attention):
    """``attention`` as given, or a model's whole output object's ``.attentions`` (what bertviz users pass)."""
    if isinstance(attention, (tuple, list)) or not hasattr(attention, "attentions"):
        return attention
    if not attention.attentions:  # None without output_attentions=True, () from SDPA or flash attention
        raise ValueError("the model's outputs hold no attentions: run it with output_attentions=True, loaded with "
                         "attn_implementation=\"eager\" (SDPA and flash attention return no weights)")
    return attention.attentions


def from_attentions(attention=None, tokens=None, *, encoder_attention=None, decoder_attention=None,
                    cross_attention=None, encoder_tokens=None, decoder_tokens=None, model: str = "",
                    kind: str | None = None):
    """A trace of given weights: ``attention`` (per layer (1, H, T, T)) with ``tokens``, or an encoder–decoder's
    three stacks with its two token lists (a Seq2SeqTrace). ``kind`` None: "decoder" when every head is causal.
    ``attention`` may be the model's whole output object: its ``.attentions`` are read."""
    attention = model_attentions(attention)
    if encoder_attention is None and decoder_attention is None and cross_attention is None:
        if tokens is None:
            raise ValueError("give the tokens with the attention: attnviz.from_attentions(outputs.attentions, tokens)")
        return _trace(tokens, stacked(attention), model, kind)
    if attention is not None:
        raise ValueError("give attention (one stack) or encoder_attention, decoder_attention and cross_attention")
    missing = [n for n, v in dict(encoder_attention=encoder_attention, decoder_attention=decoder_attention,
                                  cross_attention=cross_attention, encoder_tokens=encoder_tokens,
                                  decoder_tokens=decoder_tokens).items() if v is None]
    if missing:
        raise ValueError(f"an encoder–decoder needs all three stacks and both token lists; missing: {', '.join(missing)}")
    encoder = _trace(encoder_tokens, stacked(encoder_attention, "encoder_attention"), model, "encoder")
    decoder = _trace(decoder_tokens, stacked(decoder_attention, "decoder_attention"), model, "decoder")
    return Seq2SeqTrace(encoder, decoder, stacked(cross_attention, "cross_attention"))
