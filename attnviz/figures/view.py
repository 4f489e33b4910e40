"""What the attention explorer shows, as pure numpy: the display options applied to a stack's weights.

Options, in the order they apply: hide special tokens (renormalising rows or not), merge subwords into
words, hide weights below a threshold. The log colour scale is a colour transform (``colour_position``).
"""

from __future__ import annotations

import html
from typing import NamedTuple

import numpy as np

from ..core.tokens import clean, labels, word_labels, word_spans
from ..core.weights import hidden_keys

LOG_DECADES = 4  # the log colour scale spans 1e-4 … 1; smaller weights get the lowest colour


class Options(NamedTuple):
    hide_special: bool = False
    renorm: bool = True  # with hide_special: rescale each row to sum to 1 over the tokens left
    merge: bool = False
    threshold: float = 0.0
    log_scale: bool = False


class Side(NamedTuple):
    """The tokens along one axis of an attention matrix."""

    tokens: tuple
    special: np.ndarray  # (T,) bool
    word_ids: np.ndarray  # (T,) int, -1 for specials


class StackView(NamedTuple):
    """One attention stack as displayed: weights after the options, labels, causal mask."""

    name: str  # "self", "encoder", "decoder" or "cross"
    attn: np.ndarray  # (L, H, Tq, Tk)
    q_labels: list  # unique per row
    k_labels: list  # unique per column
    q_text: list  # (text, space before, raw token) per row, for showing the text itself
    k_text: list
    masked: np.ndarray | None  # (Tq, Tk) bool, True where a causal model cannot look (future tokens)


def side(stack) -> Side:
    """The Side of an AttentionTrace."""
    return Side(stack.tokens, stack.special, stack.word_ids)


def layer_view(stack, layer: int, options: Options) -> StackView:
    """The view of one layer of a trace's ``Stack``, every head, read tile by tile: its ``attn`` is
    (1, H, Tq', Tk'), an L-th of the stack's weights (the display options act on each head alone)."""
    attn = stack.weights.layer(layer)[None]  # (1, H, Tq, Tk)
    return stack_view(stack.name, attn, side(stack.queries), side(stack.keys), stack.causal, options)


def layer_views(stack, options: Options):
    """``layer_view`` of every layer in turn, one held at a time."""
    return (layer_view(stack, layer, options) for layer in range(stack.weights.shape[0]))


def head_view(stack, layer: int, head: int | None, options: Options) -> StackView:
    """The view of one head of a trace's ``Stack`` (the layer's mean when ``head`` is None), read on demand: its
    ``attn`` is (1, 1, Tq', Tk'), whatever the length of the text and the number of heads."""
    attn = stack.weights.head(layer, head)[None, None]  # (1, 1, Tq, Tk)
    return stack_view(stack.name, attn, side(stack.queries), side(stack.keys), stack.causal, options)


def stack_view(name: str, attn, q: Side, k: Side, causal: bool, options: Options) -> StackView:
    """Apply ``options`` to ``attn`` (L, H, Tq, Tk) whose rows are ``q`` and columns ``k``."""
    attn = np.asarray(attn, np.float32)
    q_keep, k_keep = _kept(q, options), _kept(k, options)
    q_pos, k_pos = np.flatnonzero(q_keep), np.flatnonzero(k_keep)
    if not (q_keep.all() and k_keep.all()):
        attn = _take(_take(attn, q_pos, -2), k_pos, -1)  # (L, H, Tq', Tk')
        if options.renorm:
            attn = renormalise(attn)
    q_tokens, q_words = tuple(q.tokens[i] for i in q_pos), q.word_ids[q_pos]
    k_tokens, k_words = tuple(k.tokens[i] for i in k_pos), k.word_ids[k_pos]
    if options.merge:
        q_spans, k_spans = word_spans(q_words), word_spans(k_words)
        attn = merge_words(attn, q_spans, k_spans)
        # A word is masked for a query word when it starts after the query word's last piece.
        q_pos = np.array([q_pos[b - 1] for _, b in q_spans])
        k_pos = np.array([k_pos[a] for a, _ in k_spans])
        q_labels, k_labels = word_labels(q_tokens, q_words), word_labels(k_tokens, k_words)
        q_text, k_text = _words_text(q_tokens, q_spans), _words_text(k_tokens, k_spans)
    else:
        q_labels, k_labels = labels(q_tokens), labels(k_tokens)
        q_text, k_text = _tokens_text(q_tokens, q_words), _tokens_text(k_tokens, k_words)
    if options.threshold > 0:
        attn = np.where(attn < options.threshold, np.float32(0), attn)
    masked = hidden_keys(q_pos[:, None], k_pos[None, :], True, None) if causal else None  # (Tq', Tk')
    return StackView(name, attn, q_labels, k_labels, q_text, k_text, masked)


def _kept(s: Side, options: Options) -> np.ndarray:
    """(T,) bool: the positions left after hiding specials; all of them if every token is special."""
    special = np.asarray(s.special, bool)
    if options.hide_special and not special.all():
        return ~special
    return np.ones(len(s.tokens), bool)


def renormalise(attn: np.ndarray) -> np.ndarray:
    """Rows rescaled to sum to 1; rows with nothing left stay 0."""
    total = attn.sum(-1, keepdims=True)
    return np.divide(attn, total, out=np.zeros_like(attn), where=total > 0)


def merge_words(attn: np.ndarray, q_spans, k_spans) -> np.ndarray:
    """Word-level weights (..., Wq, Wk) from token-level (..., Tq, Tk): sum over key pieces, mean over query pieces.

    The same convention as ``attnviz.core.tokens.merge_subwords``, without its (T, W) matmuls, which take
    seconds for every head at 512 tokens.
    """
    q_sizes = np.array([b - a for a, b in q_spans])
    queries = _sum_spans(attn, q_spans, -2) / q_sizes[:, None].astype(np.float32)  # (..., Wq, Tk)
    return _sum_spans(queries, k_spans, -1)  # (..., Wq, Wk)


def _sum_spans(x: np.ndarray, spans, axis: int) -> np.ndarray:
    """Sums of ``x`` over contiguous ``spans`` along ``axis``: one gather per piece offset (words are short)."""
    starts = np.array([a for a, _ in spans])
    sizes = np.array([b - a for a, b in spans])
    out = _take(x, starts, axis)
    at = [slice(None)] * x.ndim
    for offset in range(1, sizes.max()):
        longer = np.flatnonzero(sizes > offset)
        at[axis] = longer
        out[tuple(at)] += _take(x, starts[longer] + offset, axis)
    return out


def _take(x: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    """``np.take``, but a cheap slice when the indices are a contiguous run (the usual [CLS] … [SEP] case)."""
    if len(index) and index[-1] - index[0] == len(index) - 1:
        at = [slice(None)] * x.ndim
        at[axis] = slice(index[0], index[-1] + 1)
        return x[tuple(at)].copy()
    return np.take(x, index, axis=axis)


def _tokens_text(tokens, word_ids) -> list:
    """(text, space before, raw token) per token: a piece that continues the previous token's word is glued to it."""
    out = []
    for i, t in enumerate(tokens):
        glued = i > 0 and word_ids[i] >= 0 and word_ids[i] == word_ids[i - 1]
        out.append((clean(t), i > 0 and not glued, t))
    return out


def _words_text(tokens, spans) -> list:
    """(text, space before, raw tokens) per word."""
    words = ["".join(clean(t) for t in tokens[a:b]) for a, b in spans]
    return [(w, i > 0, " ".join(tokens[a:b])) for i, (w, (a, b)) in enumerate(zip(words, spans))]


def colour_top(w: np.ndarray, masked: np.ndarray | None = None) -> float:
    """The weight that gets the darkest colour: a head's own high quantile, so a diffuse head over many
    tokens (every weight ~1/T) is not a blank square on a 0–1 scale.

    The larger of the 99th percentile and the median row's largest weight (a head whose rows each put
    everything on one token keeps its top at that weight), in (0, 1]; over the cells not ``masked``.
    """
    w = np.asarray(w, np.float32)
    if w.size == 0:
        return 1.0
    shown = w[~np.asarray(masked, bool)] if masked is not None else w.ravel()
    top = max(float(np.percentile(shown, 99)) if shown.size else 0.0, float(np.median(w.max(-1))))
    return float(min(1.0, top)) if top > 0 else 1.0


def colour_tops(attn: np.ndarray) -> np.ndarray:
    """(L, H) ``colour_top`` of every head of (L, H, Tq, Tk), in one pass."""
    attn = np.asarray(attn, np.float32)
    top = np.maximum(np.percentile(attn, 99, axis=(-2, -1)), np.median(attn.max(-1), -1))
    return np.where(top > 0, np.minimum(top, 1.0), 1.0).astype(np.float32)


def colour_position(w: np.ndarray, log_scale: bool, top=1.0) -> np.ndarray:
    """Where weights sit on the 0–1 colour scale: the weight over ``top`` (clipped at 1; ``top`` may be an
    array that broadcasts), or its log over LOG_DECADES decades (which ignores ``top``)."""
    w = np.asarray(w, np.float32)
    if not log_scale:
        if np.all(np.asarray(top) == 1):
            return w
        return np.clip(w / np.asarray(top, np.float32), 0, 1).astype(np.float32)
    with np.errstate(divide="ignore"):
        return np.clip((np.log10(w) + LOG_DECADES) / LOG_DECADES, 0, 1).astype(np.float32)


def log_ticks() -> tuple[list[float], list[str]]:
    """Colour-bar positions and labels of the log scale's decades."""
    return [d / LOG_DECADES for d in range(LOG_DECADES + 1)], [f"{10.0 ** (d - LOG_DECADES):g}" for d in range(LOG_DECADES + 1)]


def head_weights(view: StackView, layer: int, head: int | None) -> np.ndarray:
    """(Tq, Tk): one head's weights, or the mean of the layer's heads when ``head`` is None."""
    return view.attn[layer].mean(0) if head is None else view.attn[layer, head]


def focus_weights(attn: np.ndarray, index: int, direction: str) -> np.ndarray:
    """(..., T): what token ``index`` attends to (its row, ``"to"``) or what attends to it (its column, ``"from"``)."""
    if direction == "to":
        return attn[..., index, :]
    if direction == "from":
        return attn[..., :, index]
    raise ValueError(f"direction must be 'to' or 'from', not {direction!r}")


def highlight_html(text: list, weights, focus: int | None = None, log_scale: bool = False, top: float = 1.0) -> str:
    """The text as escaped HTML spans, each shaded by its weight (background alpha = colour position,
    ``top`` the weight shaded darkest).

    ``text`` is (piece, space before, raw token) per position, the raw token in the hover; ``focus`` is outlined.
    """
    alpha = colour_position(np.asarray(weights), log_scale, top)
    spans = []
    for i, ((piece, space, raw), a, w) in enumerate(zip(text, alpha, weights)):
        style = f"background:rgba(33,113,181,{float(a):.3f});border-radius:3px;padding:0 1px;"
        style += "color:white;" if a > 0.55 else ""  # dark shading needs light text
        style += "outline:2px solid #d62728;" if i == focus else ""
        hover = html.escape(f"{float(w):.4f} · token {raw}")
        spans.append(f'{" " if space else ""}<span title="{hover}" style="{style}">{html.escape(piece)}</span>')
    return '<div style="line-height:2;font-size:1.05rem;overflow-wrap:anywhere">' + "".join(spans) + "</div>"


def focus_html(view: StackView, layer: int, head: int | None, focus: int, direction: str, log_scale: bool = False,
               full_range: bool = False) -> str:
    """The text shaded by what token ``focus`` attends to (``"to"``) or by how much each token attends to it
    (``"from"``), on the same colour range as the head's heatmap."""
    attn = head_weights(view, layer, head)
    w = focus_weights(attn, focus, direction)
    text = view.k_text if direction == "to" else view.q_text
    top = 1.0 if full_range else colour_top(attn, view.masked)
    return highlight_html(text, w, None if view.name == "cross" else focus, log_scale, top)

