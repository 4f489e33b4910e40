"""Per-text head statistics for a corpus: right-padded batches, each text's numbers those of its own trace.

The recorder keeps each text's queries and keys cut to its own tokens (``attnviz.capture.record.record(net,
lengths)``), so padding never reaches a statistic and a text's numbers are those of
``head_stats(attnviz.trace(text))``, computed for a whole batch at once (``padded_head_stats``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..analysis.heads import PER_ROW, HEAD_STATS, head_stats, is_punctuation, key_masks, row_means, row_sums
from ..backends.common import check_text, encode
from ..capture.record import record
from ..core.tokens import clean
from ..core.trace import AttentionTrace
from ..core.weights import PaddedQK, rows_per_tile

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
BATCH_TEXTS = 16
BATCH_TOKENS = 8192  # a batch holds at most this many padded positions
CACHED_TILE = 4  # a batch's tile is this much smaller than TILE_FLOATS: the dozen passes over it stay in cache
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only
or other our ours ourselves out over own same she should so some such than that the their theirs them themselves
then there these they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves
""".split())
CATEGORIES = {
    "special": "special tokens ([CLS], [SEP], <s>, …)",
    "punctuation": "punctuation tokens",
    "stop_word": "stop words (the, of, and, …)",
    "word_piece": "word pieces: tokens that continue a word",
    "number": "numbers",
}
NAMES = (*HEAD_STATS, *CATEGORIES)  # every per-head statistic a corpus run keeps





def categories(tokens, special: np.ndarray, word_ids: np.ndarray) -> dict[str, np.ndarray]:
    """(T,) bool key masks of each token category in CATEGORIES."""
    special = np.asarray(special, bool)
    words = np.asarray(word_ids)
    plain = [clean(t).strip().lower() for t in tokens]
    piece = np.zeros(len(tokens), bool)
    piece[1:] = (words[1:] == words[:-1]) & (words[1:] >= 0)
    return {
        "special": special,
        "punctuation": np.array([is_punctuation(t) for t in tokens]) & ~special,
        "stop_word": np.array([p in STOP_WORDS for p in plain]) & ~special & ~piece,
        "word_piece": piece & ~special,
        "number": np.array([bool(p) and p.replace(".", "").replace(",", "").isdigit() for p in plain]) & ~special,
    }


def trace_stats(trace) -> dict[str, np.ndarray]:
    """One trace's statistics: name in NAMES -> (L, H) float64."""
    return head_stats(trace, categories(trace.tokens, trace.special, trace.word_ids))


def batchable(backend) -> bool:
    """Whether the backend runs padded batches: attnviz's own encoders, and captured Hugging Face models."""
    from ..backends.builtin import BuiltinModel
    from ..backends.hf import HFModel

    if isinstance(backend, HFModel):
        return backend.capture == "interface" and backend.kind != "encoder-decoder"
    return type(backend) is BuiltinModel


def _rows(padded: PaddedQK, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query rows ``start:stop`` of each text's weights in a padded batch (what ``LayerQK.weights`` gives), zero on
    the keys past its end, (B, H, rows, T) float32; their row entropies and largest weights (B, H, rows). Rows
    past a text's end are filler."""
    B, T, H = len(padded.layers), padded.T, padded.layers[0].shape[0]
    if not padded.fast:
        w = torch.zeros(B, H, stop - start, T)
        for b, x in enumerate(padded.layers):
            n = x.shape[1]
            if start < n:  # the recipe's own exact path, text by text
                w[b, :, : min(stop, n) - start, :n] = x.weights(list(range(H)), start, min(stop, n))
        return w, -torch.special.xlogy(w, w).sum(-1), w.amax(-1)
    scores = padded.scores(start, stop)  # (B, H, rows, T)
    # softmax by hand: with u = s − max_j s, a row's largest weight is 1 / Σ e^u and its entropy
    # −Σ α ln α = ln Σ e^u − Σ α u, with no log per weight (a hidden key has e^u = 0 exactly, and α u = 0)
    u = scores.sub_(scores.amax(-1, keepdim=True))
    w = u.exp()
    z = w.sum(-1, keepdim=True)  # (B, H, rows, 1)
    w /= z
    return w, z[..., 0].log() - (w * u).sum(-1), z[..., 0].reciprocal()


def padded_head_stats(layers: list[list], keys: dict[str, torch.Tensor], lengths: list[int],
                      decoder: bool) -> dict[str, np.ndarray]:
    """``head_stats`` of every text of a right-padded batch at once: name -> (B, L, H) float64.

    ``layers[b]`` is text b's LayerQK per layer (cut to its own n_b tokens); ``keys`` name -> (B, T) the key masks
    whose shares head_stats adds (``key_masks`` and the ``shares`` given to it; 0 past a text's end). Each per-row
    quantity of head_stats is computed for the whole batch, tile by tile of rows, with the rows past a text's end
    set to 0, so padding never reaches a statistic.
    """
    B, L, (H, _, _) = len(layers), len(layers[0]), layers[0][0].shape
    T = max(lengths)
    n = torch.tensor(lengths)[:, None]  # (B, 1)
    masks = torch.stack([m.float() for m in keys.values()], dim=-1)  # (B, T, K)
    sums = torch.zeros(len(PER_ROW) + len(keys), B, L, H, dtype=torch.float64)
    step = rows_per_tile(B * H, T, smaller=CACHED_TILE)
    with torch.inference_mode():
        for layer in range(L):
            padded = PaddedQK([x[layer] for x in layers], T)
            for a in range(0, T, step):
                z = min(a + step, T)
                w, ent, top = _rows(padded, a, z)  # (B, H, rows, T), (B, H, rows), (B, H, rows)
                r = torch.arange(a, z)[None, :]  # (1, rows)
                real = r < n  # (B, rows): the text's own queries
                if min(lengths) < z:  # filler rows in this tile: 0, so sums over all rows are over real ones
                    w *= real[:, None, :, None]
                    ent, top = ent * real[:, None], top * real[:, None]
                attendable = (r + 1) if decoder else n  # (B or 1, rows or 1)
                inv_log_n = torch.where(real & (attendable > 1), 1 / torch.log(attendable.clamp(min=2).float()), 0)
                sums[:, :, layer] += row_sums(w, a, masks, inv_log_n, ent, top)  # (7 + K, B, H)
    return row_means(dict(zip((*PER_ROW, *keys), sums)), n.double()[:, :, None], decoder)


def _padded_batch(backend, encs: list) -> dict[str, np.ndarray]:
    """One right-padded forward over the encoded texts ``encs``, then every text's statistics: name -> (B, L, H)."""
    from ..backends.hf import HFModel

    lengths = [len(e.ids) for e in encs]
    B, T = len(encs), max(lengths)
    ids = torch.zeros(B, T, dtype=torch.long)  # (B, T); padding (id 0) is masked out
    for b, e in enumerate(encs):
        ids[b, : lengths[b]] = torch.tensor(e.ids)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T) 1 for real tokens
    with torch.inference_mode(), record(backend.net, lengths) as rec:
        if isinstance(backend, HFModel):
            backend.net(input_ids=ids.to(backend.device), attention_mask=mask.to(backend.device))
        else:
            backend.net(ids, mask)
    keys: dict[str, torch.Tensor] = {}
    for b, e in enumerate(encs):  # each text's key masks, read from its trace as trace_stats does
        t = AttentionTrace(e.tokens, weights=rec.weights(item=b), special=e.special, word_ids=e.word_ids,
                           model=backend.key, kind=backend.kind, truncated=e.truncated)
        for name, m in {**key_masks(t), **categories(t.tokens, t.special, t.word_ids)}.items():
            keys.setdefault(name, torch.zeros(B, T, dtype=torch.bool))[b, : lengths[b]] = torch.tensor(m)
    return padded_head_stats([rec.layers(item=b) for b in range(B)], keys, lengths, backend.kind == "decoder")


def text_stats(backend, texts: list[str], batch_texts: int = BATCH_TEXTS, max_tokens: int | None = None,
               tick: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """Each text's statistics: name in NAMES -> (n, L, H) float32, and "n_tokens" -> (n,).

    Texts are cut to ``max_tokens`` (default: the backend's limit), sorted by length and run in padded batches
    (one at a time where the backend cannot batch); ``tick(texts_done)`` is called before each batch, where a
    caller that wants the work stopped can raise.
    """
    if backend.kind == "encoder-decoder":
        raise ValueError(f"corpus mode runs encoders and decoders; {backend.key} is an encoder–decoder")
    n = len(texts)
    out = {name: np.empty((n, backend.n_layers, backend.n_heads), np.float32) for name in NAMES}
    out["n_tokens"] = np.empty(n, np.int64)
    if not batchable(backend):
        for i, text in enumerate(texts):
            if tick is not None:
                tick(i)
            trace = backend.trace(text, max_tokens=max_tokens)
            for name, value in trace_stats(trace).items():
                out[name][i] = value
            out["n_tokens"][i] = trace.n_tokens
        return out
    with backend.lock:
        encs = [encode(backend.tokenizer, check_text(t), backend.limit(max_tokens)) for t in texts]
    order = sorted(range(n), key=lambda i: len(encs[i].ids))  # similar lengths together: little padding
    start = 0
    while start < n:
        stop = start + 1  # the longest text last: a batch grows while its padded size fits BATCH_TOKENS
        while stop < n and stop - start < batch_texts and (stop - start + 1) * len(encs[order[stop]].ids) <= BATCH_TOKENS:
            stop += 1
        chosen = order[start:stop]
        if tick is not None:
            tick(start)
        with backend.lock:
            stats = _padded_batch(backend, [encs[i] for i in chosen])
        for name in NAMES:
            out[name][chosen] = stats[name]
        out["n_tokens"][chosen] = [len(encs[i].ids) for i in chosen]
        start = stop
    return out

# ---------------------------------------------------------------- results


@dataclass
class CorpusStats:
    """Per-text statistics of a corpus: ``values[name]`` (N, L, H), with the texts' positions ``ids`` (N,)."""

    model: str
    ids: np.ndarray
    n_tokens: np.ndarray
    values: dict

    @property
    def n_texts(self) -> int:
        return len(self.ids)

    def table(self):
        """One row per head: layer, head, n_texts, then per statistic its mean and quantiles (name_mean, name_p10 …)."""
        import pandas as pd

        L, H = next(iter(self.values.values())).shape[1:]
        layer, head = np.divmod(np.arange(L * H), H)
        columns = {"layer": layer, "head": head, "n_texts": np.full(L * H, self.n_texts)}
        for name, v in self.values.items():
            flat = v.reshape(len(v), L * H).astype(np.float64)  # (N, L·H)
            columns[f"{name}_mean"] = flat.mean(0)
            for q, value in zip(QUANTILES, np.quantile(flat, QUANTILES, axis=0)):
                columns[f"{name}_p{round(q * 100)}"] = value
        return pd.DataFrame(columns)

    def grid(self, name: str, what: str = "mean") -> np.ndarray:
        """(L, H): a statistic's mean (or quantile "p10" …) per head."""
        v = self.values[name].astype(np.float64)
        return v.mean(0) if what == "mean" else np.quantile(v, int(what[1:]) / 100, axis=0)

    def top(self, by: str = "max", k: int = 5, texts: dict | None = None):
        """Per head, the k texts where statistic ``by`` is highest ("most") and lowest ("least"): one row each
        with layer, head, end, rank, text_id, value (and text, from ``texts`` {id: text}, when given)."""
        import pandas as pd

        v = self.values[by]  # (N, L, H)
        N, L, H = v.shape
        k = min(k, N)
        order = np.argsort(v.reshape(N, L * H), axis=0, kind="stable")  # (N, L·H) ascending
        rows = []
        for end, picks in (("most", order[::-1][:k]), ("least", order[:k])):
            for rank, row in enumerate(picks):
                for lh, i in enumerate(row):
                    rows.append((lh // H, lh % H, end, rank, int(self.ids[i]), float(v.reshape(N, L * H)[i, lh])))
        frame = pd.DataFrame(rows, columns=["layer", "head", "end", "rank", "text_id", "value"])
        if texts is not None:
            frame["text"] = [texts.get(i, "") for i in frame["text_id"]]
        return frame.sort_values(["layer", "head", "end", "rank"], ignore_index=True)


class Totals:
    """Running sums of every statistic over the texts done so far: the means' grid and table while a job runs,
    without reloading its shards."""

    def __init__(self):
        self.n_texts, self.sums = 0, {}

    def add(self, stats: dict) -> None:
        """Add one shard's per-text statistics (name -> (n, L, H))."""
        for name in NAMES:
            self.sums[name] = self.sums.get(name, 0.0) + stats[name].sum(0, dtype=np.float64)
        self.n_texts += len(stats["n_tokens"])

    def grid(self, name: str) -> np.ndarray:
        """(L, H): the statistic's mean per head so far."""
        return self.sums[name] / self.n_texts

    def table(self):
        """One row per head: layer, head, n_texts and each statistic's mean (CorpusStats.table's mean columns)."""
        import pandas as pd

        L, H = self.sums[NAMES[0]].shape
        layer, head = np.divmod(np.arange(L * H), H)
        return pd.DataFrame({"layer": layer, "head": head, "n_texts": np.full(L * H, self.n_texts),
                             **{f"{name}_mean": self.grid(name).ravel() for name in NAMES}})


def write_table(frame, out: Path) -> None:
    """A DataFrame as Parquet or CSV, by the name's suffix, written whole or not at all."""
    tmp = out.with_name(out.name + ".tmp")
    if out.suffix.lower() == ".csv":
        frame.to_csv(tmp, index=False)
    else:
        frame.to_parquet(tmp, index=False)
    os.replace(tmp, out)
