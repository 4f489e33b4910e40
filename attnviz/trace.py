"""AttentionTrace: the one record every view reads.

Numpy arrays without a batch dimension, made read-only on construction (copied unless already
read-only). Shapes use the legend in ``attnviz/__init__.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Mapping

import numpy as np

KINDS = ("encoder", "decoder")

# Per-layer statistics a backend may record (all optional), each (L, T) unless noted.
NORM_KEYS = {
    "attn_out": "‖attention sublayer output‖ added to the residual stream",
    "ffn_out": "‖feed-forward sublayer output‖ added to the residual stream",
    "ln1_in_mean": "mean of the input to the attention sublayer's LayerNorm",
    "ln1_in_std": "std of the input to the attention sublayer's LayerNorm",
    "ln1_out": "‖output of the attention sublayer's LayerNorm‖",
    "ln2_in_mean": "mean of the input to the feed-forward sublayer's LayerNorm",
    "ln2_in_std": "std of the input to the feed-forward sublayer's LayerNorm",
    "ln2_out": "‖output of the feed-forward sublayer's LayerNorm‖",
    "value_norms": "(L, H, T) ‖f_h(x_j)‖: value vector of head h through its slice of W_O",
}


def _frozen(a, dtype=None) -> np.ndarray:
    """A read-only array of ``dtype``. One that already is read-only is adopted without a copy: whoever
    made it read-only gave it up (the backends do, to spare a 75 MB copy at 512 tokens); any other is copied,
    so the caller's later writes never reach the trace."""
    if isinstance(a, np.ndarray) and not a.flags.writeable and (dtype is None or a.dtype == dtype):
        return a
    a = np.array(a, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


def _reduce(self):
    """Pickle through the constructor, so an unpickled copy (what st.cache_data hands out) is read-only too."""
    return type(self), tuple(getattr(self, f.name) for f in fields(self))


@dataclass(frozen=True)
class AttentionTrace:
    """One model stack run on one text: tokens, attention weights, hidden states, statistics."""

    tokens: tuple[str, ...]  # (T,) raw tokenizer tokens
    attentions: np.ndarray  # (L, H, T, T) float32, rows are queries and sum to 1 (0 where masked)
    hidden_states: np.ndarray | None = None  # (L+1, T, D): embeddings output, then each layer's
    norms: Mapping[str, np.ndarray] = field(default_factory=dict)  # see NORM_KEYS
    special: np.ndarray | None = None  # (T,) bool, True for [CLS], [SEP], <s>, …
    word_ids: np.ndarray | None = None  # (T,) int, word index of each token, -1 for specials
    model: str = ""
    kind: str = "encoder"  # "encoder" (bidirectional) or "decoder" (causal)
    text: str = ""
    truncated: int = 0  # how many tokens were cut to fit the model's positions

    __reduce__ = _reduce

    def __post_init__(self):
        T = len(self.tokens)
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("tokens", tuple(str(t) for t in self.tokens))
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")
        if T == 0:
            raise ValueError("a trace needs at least one token")

        attn = _frozen(self.attentions, np.float32)
        if attn.ndim != 4:
            raise ValueError(f"attentions must have 4 dimensions (layers, heads, queries, keys), got shape {attn.shape}")
        if attn.shape[2] != T or attn.shape[3] != T:
            raise ValueError(f"attentions have {attn.shape[2]}×{attn.shape[3]} positions but there are {T} tokens")
        set_("attentions", attn)
        L = attn.shape[0]

        if self.hidden_states is not None:
            hs = _frozen(self.hidden_states, np.float32)
            if hs.ndim != 3 or hs.shape[0] != L + 1 or hs.shape[1] != T:
                raise ValueError(
                    f"hidden_states must be ({L + 1}, {T}, D) for {L} layers and {T} tokens, got {hs.shape}"
                )
            set_("hidden_states", hs)

        norms = {}
        for name, value in dict(self.norms).items():
            if name not in NORM_KEYS:
                raise ValueError(f"unknown norm statistic {name!r}; known: {', '.join(NORM_KEYS)}")
            v = _frozen(value, np.float32)
            want = (L, attn.shape[1], T) if name == "value_norms" else (L, T)
            if v.shape != want:
                raise ValueError(f"norm statistic {name!r} must have shape {want}, got {v.shape}")
            norms[name] = v
        set_("norms", norms)

        special = np.zeros(T, bool) if self.special is None else np.asarray(self.special, bool)
        if special.shape != (T,):
            raise ValueError(f"special-token mask has {special.size} entries but there are {T} tokens")
        set_("special", _frozen(special))
        words = np.arange(T) if self.word_ids is None else np.asarray(self.word_ids, np.int64)
        if words.shape != (T,):
            raise ValueError(f"word_ids has {words.size} entries but there are {T} tokens")
        set_("word_ids", _frozen(words))

    @property
    def n_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def n_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        arrays = [self.attentions, self.hidden_states, self.special, self.word_ids, *self.norms.values()]
        return sum(a.nbytes for a in arrays if a is not None)


@dataclass(frozen=True)
class Seq2SeqTrace:
    """An encoder–decoder run: encoder self-attention, causal decoder self-attention, cross-attention."""

    encoder: AttentionTrace  # source tokens (Ts,)
    decoder: AttentionTrace  # target tokens (Tt,), kind "decoder"
    cross_attentions: np.ndarray  # (L, H, Tt, Ts): decoder queries over encoder keys
    generated: bool = False  # True when the target is the model's own greedy output

    __reduce__ = _reduce

    def __post_init__(self):
        cross = _frozen(self.cross_attentions, np.float32)
        Tt, Ts = self.decoder.n_tokens, self.encoder.n_tokens
        if cross.ndim != 4 or cross.shape[2:] != (Tt, Ts):
            raise ValueError(
                f"cross-attentions must be (layers, heads, {Tt} target, {Ts} source tokens), got {cross.shape}"
            )
        if cross.shape[:2] != self.decoder.attentions.shape[:2]:
            raise ValueError(
                f"cross-attentions have {cross.shape[0]} layers × {cross.shape[1]} heads but the decoder has "
                f"{self.decoder.n_layers} × {self.decoder.n_heads}"
            )
        if self.decoder.kind != "decoder":
            raise ValueError("the decoder side of an encoder–decoder trace must be causal (kind 'decoder')")
        object.__setattr__(self, "cross_attentions", cross)

    kind = "encoder-decoder"

    @property
    def model(self) -> str:
        return self.encoder.model

    @property
    def text(self) -> str:
        return self.encoder.text

    @property
    def truncated(self) -> int:
        return self.encoder.truncated

    @property
    def nbytes(self) -> int:
        return self.encoder.nbytes + self.decoder.nbytes + self.cross_attentions.nbytes
