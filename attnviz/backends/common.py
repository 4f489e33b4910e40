"""What every backend shares: checking text, tokenizing with truncation, the Backend interface."""

from __future__ import annotations

import os
import re
import threading
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Protocol

import numpy as np

MAX_CHARS = 100_000  # longer text is cut before tokenizing; the models see at most a few thousand tokens anyway


def check_text(text) -> str:
    """The text to run, or a ValueError that says what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, not {type(text).__name__}")
    # Lone surrogates (from a broken paste or a URL) cannot be encoded: replace them.
    text = text.encode("utf-8", "replace").decode("utf-8")
    # Only spaces or invisible characters (NUL, zero-width, bidi controls): tokenizers drop them all.
    if not any(c.isprintable() and not c.isspace() for c in text):
        raise ValueError("The text is empty: enter a sentence or two to see its attention.")
    return text[:MAX_CHARS]


def handed_over(t) -> np.ndarray:
    """A CPU float32 tensor as a read-only numpy view: given up to the trace, which adopts it without a copy
    (``AttentionTrace`` keeps read-only arrays as they are)."""
    out = t.numpy()
    out.setflags(write=False)
    return out


_COPIERS = ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="attnviz-copy")


def stacked(tensors) -> np.ndarray:
    """Batch-of-one tensors, one per layer, as one read-only float32 array (N, ...).

    This is the trace's only copy of its attention weights (75 MB at 512 tokens for MiniLM), which
    AttentionTrace adopts as it is. Numpy copies with the GIL released, so the layers are copied in
    parallel: 10 ms instead of 17 on two cores, where torch.cat takes 26.
    """
    out = np.empty((len(tensors), *tensors[0].shape[1:]), np.float32)  # (N, ...)

    def copy(i):
        out[i] = tensors[i][0].float().cpu().numpy()  # (1, ...) -> (...)

    list(_COPIERS.map(copy, range(len(tensors))))
    out.setflags(write=False)  # given up to the trace, like ``handed_over``
    return out


class Encoded(NamedTuple):
    ids: list  # (T,) token ids, special tokens included
    tokens: tuple  # (T,) token strings
    special: np.ndarray  # (T,) bool
    word_ids: np.ndarray  # (T,) int, -1 for special tokens
    truncated: int  # tokens dropped to fit max_tokens


def _word_ids(enc, text: str, special: np.ndarray) -> np.ndarray:
    """(T,) word index of each token, -1 for special tokens."""
    if not enc.is_fast:  # Python tokenizers (ByT5's bytes) know no words: each token stands alone
        words = np.arange(len(special))
    else:
        words = np.array([-1 if w is None else w for w in enc.word_ids()], dtype=np.int64)
        # SentencePiece tokenizers that do not pre-split (Llama 2, Mistral) put every token in word 0:
        # where whitespace finds more words than the tokenizer does, use whitespace-separated words.
        starts = [m.start() for m in re.finditer(r"\S+", text)]
        # (blanks before the first word belong to it: -1 is for special tokens only)
        ends = [max(end - 1, 0) for _, end in enc["offset_mapping"]]
        spaced = np.array([max(bisect_right(starts, e) - 1, 0) for e in ends], np.int64)
        if len(set(spaced[~special])) > len(set(words[~special])):
            words = spaced
    words[special] = -1
    return words


def encode(tokenizer, text: str, max_tokens: int) -> Encoded:
    """Tokenize ``text``, keeping at most ``max_tokens`` (specials included)."""
    fast = bool(getattr(tokenizer, "is_fast", False))
    enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=fast, verbose=False)
    n_full = len(enc["input_ids"])
    if n_full > max_tokens:  # again, cut by the tokenizer itself (it keeps the closing special tokens)
        enc = tokenizer(text, add_special_tokens=True, truncation=True, max_length=max_tokens,
                        return_offsets_mapping=fast)
    ids = enc["input_ids"]
    special = np.array(
        tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True), dtype=bool
    )
    words = _word_ids(enc, text, special)
    tokens = tuple(tokenizer.convert_ids_to_tokens(ids))
    return Encoded(ids, tokens, special, words, max(0, n_full - len(ids)))


class Backend(Protocol):
    """A loaded model that turns text into a trace. ``lock`` serialises use of the shared model."""

    key: str
    kind: str  # "encoder", "decoder" or "encoder-decoder"
    n_layers: int
    n_heads: int
    max_tokens: int
    lock: threading.Lock

    def trace(self, text: str, target: str | None = None): ...
