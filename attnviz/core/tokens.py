"""Display labels for tokens: cleaned of subword markers, unique per position, word spans."""

from __future__ import annotations

from collections import Counter

import numpy as np

# Byte-level BPE (GPT-2, RoBERTa, SmolLM) marks a leading space with Ġ and a newline with Ċ;
# SentencePiece (T5, Llama, Marian) marks a leading space with ▁ and spells bytes it has no piece for as <0x0A>;
# WordPiece marks a continuation with ##. A line break or a tab reads as a mark (↵, ⇥), so one stays visible.
NEWLINE, TAB = "↵", "⇥"
_MARKERS = {"Ġ": " ", "Ċ": NEWLINE, "ĉ": TAB, "▁": " ", "\r\n": NEWLINE, "\n": NEWLINE, "\r": NEWLINE, "\t": TAB}
_BYTE_FALLBACK = {"<0x0A>": NEWLINE, "<0x0D>": NEWLINE, "<0x09>": TAB, "<0x20>": "␣"}


def _byte_symbols() -> dict[str, int]:
    """GPT-2's byte-level alphabet, symbol -> byte: printable Latin-1 stands for itself, other bytes from U+0100."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in keep]
    return {**{chr(b): b for b in keep}, **{chr(256 + i): b for i, b in enumerate(moved)}}


_BYTE_OF = _byte_symbols()


def _unbyte(token: str) -> str:
    """A byte-level token that spells non-ASCII text one symbol per byte ("ĠcafÃ©") as that text (" café")."""
    if token.isascii():
        return token
    try:
        text = bytes(_BYTE_OF[c] for c in token).decode("utf-8")
    except (KeyError, UnicodeDecodeError):  # not byte-level, or a character split across tokens
        return token
    return token if text.isascii() else text


def clean(token: str) -> str:
    """A token as a person reads it: subword markers dropped, blanks made visible, line breaks as ↵."""
    if token in _BYTE_FALLBACK:
        return _BYTE_FALLBACK[token]
    token = _unbyte(token)
    if token.startswith("##") and len(token) > 2:
        token = token[2:]
    for marker, plain in _MARKERS.items():
        token = token.replace(marker, plain)
    token = token.strip(" ")
    return token if token else "␣"


class Label(str):
    """A token's display label that keeps the raw token it was cleaned from (``raw``): it compares, prints and
    serialises as the label, and figures put the raw token in the hover beside it."""

    raw: str

    def __new__(cls, text: str, raw: str):
        label = super().__new__(cls, text)
        label.raw = raw
        return label

    def __reduce__(self):
        return Label, (str(self), self.raw)


def labels(tokens, raw=None) -> list[Label]:
    """Cleaned labels, unique per position: a repeated label gets its position appended. Each keeps its raw token
    (``raw``: the raw text of each position, where ``tokens`` are already words)."""
    out = [clean(t) for t in tokens]
    while len(set(out)) < len(out):  # again if a suffixed label meets a token that reads "a (1)" already
        counts = Counter(out)
        out = [c if counts[c] == 1 else f"{c} ({i})" for i, c in enumerate(out)]
    return [Label(c, str(t)) for c, t in zip(out, tokens if raw is None else raw)]


def word_spans(word_ids) -> list[tuple[int, int]]:
    """Token ranges [start, stop) of each word, in order; tokens with word id -1 stand alone."""
    spans: list[tuple[int, int]] = []
    ids = np.asarray(word_ids)
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] < 0 or ids[i] != ids[start]:
            spans.append((start, i))
            start = i
    return spans


def merge_matrix(word_ids) -> np.ndarray:
    """(W, T) 0/1 matrix that sums token columns into their word's column."""
    spans = word_spans(word_ids)
    m = np.zeros((len(spans), len(word_ids)), np.float32)
    for w, (a, b) in enumerate(spans):
        m[w, a:b] = 1.0
    return m


def merge_subwords(attn: np.ndarray, word_ids) -> np.ndarray:
    """Word-level attention from token-level (..., T, T): sum over key pieces, mean over query pieces.

    Rows still sum to 1 (Clark et al. 2019 use the same convention).
    """
    m = merge_matrix(word_ids)  # (W, T)
    keys = attn @ m.T  # (..., T, W)
    return (m / m.sum(1, keepdims=True)) @ keys  # (..., W, W)


def word_labels(tokens, word_ids) -> list[Label]:
    """Labels for merged words: the cleaned pieces joined, unique per position; the raw pieces, spaced, as raw."""
    words, raw = [], []
    for a, b in word_spans(word_ids):
        words.append("".join(clean(t) if i == a else clean(t).lstrip() for i, t in enumerate(tokens[a:b], a)))
        raw.append(" ".join(tokens[a:b]))
    return labels(words, raw)
