"""The trace: the one record every view reads, with any head's weights exact and on demand.

Numpy out, no batch dimension, read-only. Weights come from a ``Weights`` source (``attnviz.core.weights``): the
captured queries and keys of a run, or a dense array. ``head``, ``row``, ``received`` and ``pooled`` compute
only what they return; ``attentions`` materialises (L, H, T, T) once, where it fits ``ATTNVIZ_MAX_DENSE_MB``.
Shapes use the legend in ``attnviz/__init__.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping, NamedTuple

import numpy as np

from .weights import DenseWeights, Weights, frozen as _frozen

KINDS = ("encoder", "decoder")
# How a trace got its weights: "interface" (queries and keys captured, weights on demand), "eager" (the
# model's own weights from eager attention, held dense: a model the capture does not reach), "dense" (given).
CAPTURES = ("interface", "eager", "dense")

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


def as_weights(attentions, what: str = "attentions") -> Weights:
    """A Weights source from a (L, H, Tq, Tk) array (frozen float32, adopted if already read-only) or a Weights."""
    if isinstance(attentions, Weights):
        return attentions
    a = np.asarray(attentions)
    if a.ndim != 4:
        raise ValueError(f"{what} must have 4 dimensions (layers, heads, queries, keys), got shape {a.shape}")
    return DenseWeights(attentions)


def _rebuild(cls, fields_: dict):
    return cls(**fields_)


def _reduce(self):
    """Pickle through the constructor, so an unpickled copy (what st.cache_data hands out) is read-only too."""
    return _rebuild, (type(self), {f.name: getattr(self, f.name) for f in fields(self)})


def _check_index(name: str, value, count: int, model: str) -> None:
    if value is None and name == "head":
        return
    if not isinstance(value, (int, np.integer)) or not 0 <= value < count:
        raise ValueError(f"{name} {value!r} is out of range for {model or 'this model'} (0–{count - 1})")


def _summary(trace) -> str:
    """One screen about a trace: its model, tokens, stacks, capture and sizes (never its arrays)."""
    shown = lambda t: ", ".join(repr(x[:20]) for x in t.tokens[:6]) + (", …" if t.n_tokens > 6 else "")  # noqa: E731
    parts = [f"model={trace.model!r}", f"kind={trace.kind!r}"]
    for name, s in stacks(trace).items():
        q, k = s.weights.shape[2:]
        parts.append(f"{name}: {s.weights.shape[0]} layers × {s.weights.shape[1]} heads × {q}×{k}")
    sides = [trace] if trace.kind != "encoder-decoder" else [trace.encoder, trace.decoder]
    for t in sides:
        hidden = "none" if t.hidden_states is None else "×".join(map(str, t.hidden_states.shape))
        parts.append(f"{t.n_tokens} tokens [{shown(t)}], hidden states {hidden}, norms {sorted(t.norms) or 'none'}")
    parts += [f"capture={trace.capture!r}", f"truncated={trace.truncated}", f"{trace.nbytes / 2**20:.1f} MB held"]
    return f"{type(trace).__name__}(" + "; ".join(parts) + ")"


class Stack(NamedTuple):
    """One attention of a trace: its weights, the tokens along its rows and columns, causality."""

    name: str  # "self", "encoder", "decoder" or "cross"
    weights: Weights
    queries: "AttentionTrace"  # the stack whose tokens are the rows
    keys: "AttentionTrace"  # the stack whose tokens are the columns
    causal: bool


class _Heads:
    """``head``, ``row``, ``received``, ``pooled`` for any stack of a trace, through ``stack(name)``."""

    def stack(self, name: str | None = None) -> Stack:
        raise NotImplementedError

    def _checked(self, stack, layer, head) -> Stack:
        s = self.stack(stack)
        L, H = s.weights.shape[:2]
        _check_index("layer", layer, L, self.model)
        _check_index("head", head, H, self.model)
        return s

    def head(self, layer: int, head: int | None, stack: str | None = None) -> np.ndarray:
        """(Tq, Tk) float32 exact weights of one head, rows are queries; ``head`` None: the layer's mean."""
        return self._checked(stack, layer, head).weights.head(layer, head)

    def row(self, layer: int, head: int | None, query: int, stack: str | None = None) -> np.ndarray:
        """(Tk,) what query position ``query`` attends to."""
        s = self._checked(stack, layer, head)
        _check_index("query", query, s.weights.shape[2], self.model)
        return s.weights.tile(layer, s.weights.heads(head), query, query + 1).mean(0)[0]

    def column(self, layer: int, head: int | None, key: int, stack: str | None = None) -> np.ndarray:
        """(Tq,) what each query gives key position ``key``."""
        s = self._checked(stack, layer, head)
        _check_index("key", key, s.weights.shape[3], self.model)
        return s.weights.column(layer, head, key)

    def received(self, layer: int, head: int | None, stack: str | None = None) -> np.ndarray:
        """(Tk,) the weight each key receives, summed over all queries."""
        return self._checked(stack, layer, head).weights.received(layer, head)

    def pooled(self, size: int, stack: str | None = None, reduce: str = "max") -> np.ndarray:
        """(L, H, s, s): every head pooled to at most ``size`` × ``size`` blocks, by block max or mean."""
        return self.stack(stack).weights.pooled(size, reduce)


@dataclass(frozen=True, init=False, eq=False)
class AttentionTrace(_Heads):
    """One model stack run on one text: tokens, attention weights, hidden states, statistics."""

    tokens: tuple[str, ...]  # (T,) raw tokenizer tokens
    weights: Weights  # (L, H, T, T) float32, rows are queries and sum to 1 (0 where masked)
    hidden_states: np.ndarray | None  # (L+1, T, D): embeddings output, then each layer's
    norms: Mapping[str, np.ndarray]  # see NORM_KEYS
    special: np.ndarray  # (T,) bool, True for [CLS], [SEP], <s>, …
    word_ids: np.ndarray  # (T,) int, word index of each token, -1 for specials
    model: str
    kind: str  # "encoder" (bidirectional) or "decoder" (causal)
    text: str
    truncated: int  # how many tokens were cut to fit the model's positions
    capture: str  # one of CAPTURES

    def __init__(self, tokens, attentions=None, hidden_states=None, norms=None, special=None, word_ids=None,
                 model: str = "", kind: str = "encoder", text: str = "", truncated: int = 0, *,
                 weights: Weights | None = None, capture: str | None = None):
        """``attentions`` (L, H, T, T) array, or ``weights``: a Weights source (captured queries and keys)."""
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        tokens = tuple(str(t) for t in tokens)
        T = len(tokens)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if T == 0:
            raise ValueError("a trace needs at least one token")
        if (attentions is None) == (weights is None):
            raise ValueError("a trace needs its attention weights: give attentions or weights (not both)")
        w = as_weights(attentions if weights is None else weights)
        if w.shape[2] != T or w.shape[3] != T:
            raise ValueError(f"attentions have {w.shape[2]}×{w.shape[3]} positions but there are {T} tokens")
        L, H = w.shape[:2]
        capture = capture or ("dense" if isinstance(w, DenseWeights) else "interface")
        if capture not in CAPTURES:
            raise ValueError(f"capture must be one of {CAPTURES}, not {capture!r}")

        if hidden_states is not None:
            hidden_states = _frozen(hidden_states, np.float32)
            if hidden_states.ndim != 3 or hidden_states.shape[0] != L + 1 or hidden_states.shape[1] != T:
                raise ValueError(
                    f"hidden_states must be ({L + 1}, {T}, D) for {L} layers and {T} tokens, got {hidden_states.shape}"
                )
        checked = {}
        for name, value in dict(norms or {}).items():
            if name not in NORM_KEYS:
                raise ValueError(f"unknown norm statistic {name!r}; known: {', '.join(NORM_KEYS)}")
            v = _frozen(value, np.float32)
            want = (L, H, T) if name == "value_norms" else (L, T)
            if v.shape != want:
                raise ValueError(f"norm statistic {name!r} must have shape {want}, got {v.shape}")
            checked[name] = v
        special = np.zeros(T, bool) if special is None else np.asarray(special, bool)
        if special.shape != (T,):
            raise ValueError(f"special-token mask has {special.size} entries but there are {T} tokens")
        words = np.arange(T) if word_ids is None else np.asarray(word_ids, np.int64)
        if words.shape != (T,):
            raise ValueError(f"word_ids has {words.size} entries but there are {T} tokens")

        for name, value in dict(tokens=tokens, weights=w, hidden_states=hidden_states, norms=checked,
                                special=_frozen(special), word_ids=_frozen(words), model=model, kind=kind,
                                text=text, truncated=truncated, capture=capture).items():
            set_(name, value)

    __reduce__ = _reduce
    __repr__ = _summary

    def stack(self, name: str | None = None) -> Stack:
        """The trace's one attention stack ("self"; None also names it)."""
        if name not in (None, "self", self.kind):
            raise ValueError(f"this {self.kind} trace has one attention stack, not {name!r}")
        return Stack("self", self.weights, self, self, self.kind == "decoder")

    @property
    def attentions(self) -> np.ndarray:
        """(L, H, T, T) float32, every head; a ValueError naming ``head`` when it would exceed the budget."""
        return self.weights.dense()

    @property
    def n_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def n_heads(self) -> int:
        return self.weights.shape[1]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        arrays = [self.hidden_states, self.special, self.word_ids, *self.norms.values()]
        return self.weights.nbytes + sum(a.nbytes for a in arrays if a is not None)


@dataclass(frozen=True, init=False, eq=False)
class Seq2SeqTrace(_Heads):
    """An encoder–decoder run: encoder self-attention, causal decoder self-attention, cross-attention."""

    encoder: AttentionTrace  # source tokens (Ts,)
    decoder: AttentionTrace  # target tokens (Tt,), kind "decoder"
    cross: Weights  # (L, H, Tt, Ts): decoder queries over encoder keys
    generated: bool  # True when the target is the model's own greedy output

    def __init__(self, encoder: AttentionTrace, decoder: AttentionTrace, cross_attentions=None,
                 generated: bool = False, *, cross: Weights | None = None):
        cross = cross_attentions if cross is None else cross
        Tt, Ts = decoder.n_tokens, encoder.n_tokens
        if not isinstance(cross, Weights):
            cross = np.asarray(cross)
        if len(cross.shape) != 4 or cross.shape[2:] != (Tt, Ts):
            raise ValueError(
                f"cross-attentions must be (layers, heads, {Tt} target, {Ts} source tokens), got {cross.shape}"
            )
        cross = as_weights(cross)
        if cross.shape[:2] != decoder.weights.shape[:2]:
            raise ValueError(
                f"cross-attentions have {cross.shape[0]} layers × {cross.shape[1]} heads but the decoder has "
                f"{decoder.n_layers} × {decoder.n_heads}"
            )
        if decoder.kind != "decoder":
            raise ValueError("the decoder side of an encoder–decoder trace must be causal (kind 'decoder')")
        for name, value in dict(encoder=encoder, decoder=decoder, cross=cross, generated=generated).items():
            object.__setattr__(self, name, value)

    __reduce__ = _reduce
    __repr__ = _summary
    kind = "encoder-decoder"
    STACKS = ("encoder", "decoder", "cross")

    def stack(self, name: str | None = None) -> Stack:
        """"encoder" (the default), "decoder" or "cross" (target queries over source keys)."""
        name = name or "encoder"
        if name == "encoder":
            return Stack(name, self.encoder.weights, self.encoder, self.encoder, False)
        if name == "decoder":
            return Stack(name, self.decoder.weights, self.decoder, self.decoder, True)
        if name == "cross":
            return Stack(name, self.cross, self.decoder, self.encoder, False)
        raise ValueError(f"stack must be one of {', '.join(self.STACKS)}, not {name!r}")

    @property
    def cross_attentions(self) -> np.ndarray:
        """(L, H, Tt, Ts) float32, every cross-attention head (within the dense budget)."""
        return self.cross.dense()

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
    def capture(self) -> str:
        return self.encoder.capture

    @property
    def nbytes(self) -> int:
        return self.encoder.nbytes + self.decoder.nbytes + self.cross.nbytes


def stacks(trace) -> dict[str, Stack]:
    """name -> Stack for every attention a trace holds: "self" for one stack; encoder, decoder, cross."""
    if trace.kind == "encoder-decoder":
        return {name: trace.stack(name) for name in Seq2SeqTrace.STACKS}
    return {"self": trace.stack()}
