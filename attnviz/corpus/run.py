"""Corpus mode: every head's statistics over thousands of texts, as distributions, with the texts that stand out.

A corpus (``.txt``, ``.csv``, ``.jsonl`` or ``.parquet``) is read as a stream within a memory budget (a Parquet
file's repeated values stay one copy, each row's size is checked before it is built), cut into shards of texts
bounded in count and characters, and each shard run in right-padded batches: the recorder keeps each text's
queries and keys cut to its own tokens (``attnviz.capture.record.record(net, lengths)``), so padding never reaches a
statistic and a text's numbers are those of ``head_stats(attnviz.trace(text))``, computed for a whole batch at
once (``padded_head_stats``). Per-text statistics (float32, (n, L, H) per statistic) are written shard by shard
next to the output, each whole or not at all and recorded in ``job.json`` with its length, checksum and texts;
a rerun keeps the shards that pass those checks, computes the others again, and nothing is kept past its shard.
With Ray (``ray_address``), the same batches run in a Ray Data actor pool, each actor loading the model once.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from .. import settings
from ..analysis.heads import STATS, head_stats, is_punctuation, key_masks
from ..backends import open_model
from ..backends.common import check_text, encode
from ..capture.record import record
from ..core.tokens import clean
from ..core.trace import AttentionTrace

FORMATS = (".txt", ".csv", ".jsonl", ".parquet")
MAX_TEXT_CHARS = 1_000_000  # one text (a line, a field) longer than this is a broken file, not a text
READ_BYTES = 4 << 20  # what one read of a Parquet file may decode at once, by its own metadata
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
SHARD_TEXTS = 256
# A shard also ends at this many characters (~32k tokens): at any text length a shard, the work a stop can lose,
# is about a minute on two cores, and one text longer than this is a shard of its own.
SHARD_CHARS = 1 << 17
BATCH_TEXTS = 16
BATCH_TOKENS = 8192  # a batch holds at most this many padded positions
STATS_TILE_FLOATS = 1 << 20  # rows of a batch's weights at a time: the dozen passes over them stay in cache
HIDDEN = -1e30  # added to a hidden key's score: its weight underflows to exactly 0, as with −inf, and 0 · HIDDEN = 0
# Short English function words (a closed class): what "attention on stop words" counts.
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
NAMES = (*STATS, *CATEGORIES)  # every per-head statistic a corpus run keeps


# ---------------------------------------------------------------- reading a corpus


class Corpus:
    """A corpus file, checked when opened (a ValueError that says what is wrong); iterating streams its texts.

    ``.txt``: one text per line, or paragraphs separated by blank lines when the file has any; ``.csv``,
    ``.jsonl``, ``.parquet``: the values of ``column``. Blank texts are skipped. Messages call the file ``name``
    (an upload's own name; default: the file's), and a Parquet file holding more than ``max_bytes`` of text is
    refused.
    """

    def __init__(self, path, column: str | None = None, name: str | None = None, max_bytes: int | None = None):
        self.path = Path(path)
        self.name, self.max_bytes = name or self.path.name, max_bytes
        self.format = self.path.suffix.lower()
        if self.format not in FORMATS:
            raise ValueError(f"{self.name}: a corpus must be {', '.join(FORMATS)}, not {self.format or 'no extension'!r}")
        if not self.path.is_file():
            raise ValueError(f"{name or self.path}: no such file")
        if self.path.stat().st_size == 0:
            raise ValueError(f"{self.name} is empty")
        self.column = column or "text"
        if self.format != ".parquet":
            with self.path.open("rb") as f:
                head = f.read(65536)
            if b"\0" in head:
                raise ValueError(f"{self.name} looks binary (it has NUL bytes), not UTF-8 text")
            try:
                head.decode("utf-8")
            except UnicodeDecodeError as e:
                if e.start < len(head) - 4:  # not just a character cut at the end of the sample
                    raise ValueError(f"{self.name} is not UTF-8 text (byte {e.start})") from None
            # paragraphs when a blank line separates two texts (not just trailing blank lines)
            self.paragraphs = self.format == ".txt" and re.search(rb"\S[ \t\r]*\n[ \t\r]*\n\s*\S", head) is not None
        self._check_column()
        if next(iter(self), None) is None:  # reads up to the first text, no further
            raise ValueError(f"{self.name} has no texts")

    def _check_column(self) -> None:
        if self.format == ".txt":
            return
        if self.format == ".parquet":
            import pyarrow.parquet as pq

            try:
                with pq.ParquetFile(self.path) as f:
                    names, meta = f.schema_arrow.names, f.metadata
            except Exception as e:
                raise ValueError(f"{self.name} is not a Parquet file: {e}") from None
            if self.column in names:
                self._check_sizes(meta)
        elif self.format == ".csv":
            with self._open() as f:
                names = next(csv.reader(f), [])
        else:
            first = next((line for line in self._lines() if line.strip()), "{}")
            names = list(self._json(first, 1))
        if self.column not in names:
            raise ValueError(f"{self.name} has no column {self.column!r}; its columns: {', '.join(map(str, names)) or 'none'}")

    def _chunks(self, meta) -> list:
        """The column's chunk metadata in each row group."""
        return [next(c for c in (rg.column(j) for j in range(rg.num_columns)) if c.path_in_schema == self.column)
                for rg in (meta.row_group(i) for i in range(meta.num_row_groups))]

    def _check_sizes(self, meta) -> None:
        """Refuse a Parquet file whose own metadata says its text is over ``max_bytes`` once uncompressed."""
        declared = sum(c.total_uncompressed_size for c in self._chunks(meta))
        if self.max_bytes is not None and declared > self.max_bytes:
            raise ValueError(f"{self.name}: its column {self.column!r} holds {declared / 1e6:,.0f} MB uncompressed, "
                             f"over the {self.max_bytes / 1e6:,.0f} MB taken here")

    def _parquet(self) -> Iterator:
        """The column's values, in batches the metadata says decode to about READ_BYTES; each row's size is read
        from the batch before the row is built, so a small file of huge repeated values never expands."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        total, row = 0, 0
        # read_dictionary: a value repeated in every row stays one copy (a 600-byte file can hold 1 MB rows)
        with pq.ParquetFile(self.path, read_dictionary=[self.column], pre_buffer=False) as f:
            for group, chunk in enumerate(self._chunks(f.metadata)):
                rows = f.metadata.row_group(group).num_rows
                size = max(chunk.total_compressed_size, chunk.total_uncompressed_size, 1)
                step = int(min(1024, max(1, READ_BYTES * rows // size)))
                for batch in f.iter_batches(batch_size=step, row_groups=[group], columns=[self.column]):
                    values = batch.column(0)
                    kind = values.type.value_type if pa.types.is_dictionary(values.type) else None
                    if kind is None or not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
                        row += len(values)
                        continue  # not text: skipped, as a non-string value is
                    sizes = pc.take(pc.utf8_length(values.dictionary), values.indices).fill_null(0).to_numpy(
                        zero_copy_only=False)  # (rows,) characters of each row's text
                    if len(sizes) and sizes.max() > MAX_TEXT_CHARS:
                        at = int(sizes.argmax())
                        raise ValueError(f"{self.name}: row {row + at + 1:,} holds {sizes[at]:,} characters, over "
                                         f"the {MAX_TEXT_CHARS:,} one text may have")
                    for i, n in enumerate(sizes.tolist()):
                        total += n
                        if self.max_bytes is not None and total > self.max_bytes:
                            raise ValueError(f"{self.name} holds more than {self.max_bytes / 1e6:,.0f} MB of text by "
                                             f"row {row + i + 1:,}, the most taken here")
                        yield values[i].as_py()
                    row += len(values)

    def _open(self):
        return self.path.open(encoding="utf-8", newline="")

    def _lines(self) -> Iterator[str]:
        """The file's lines, refusing one over MAX_TEXT_CHARS without reading it whole."""
        with self._open() as f:
            for number, line in enumerate(iter(lambda: f.readline(MAX_TEXT_CHARS + 2), ""), 1):
                if len(line) > MAX_TEXT_CHARS and not line.endswith("\n"):
                    raise ValueError(f"{self.name}: line {number} is longer than {MAX_TEXT_CHARS:,} characters")
                yield line

    def _json(self, line: str, number: int) -> dict:
        try:
            record_ = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.name}: line {number} is not JSON ({e.msg})") from None
        if not isinstance(record_, dict):
            raise ValueError(f"{self.name}: line {number} is not a JSON object")
        return record_

    def _raw(self) -> Iterator:
        if self.format == ".txt":
            if not self.paragraphs:
                yield from self._lines()
                return
            block: list[str] = []
            for line in self._lines():
                if line.strip():
                    block.append(line)
                elif block:
                    yield "".join(block)
                    block = []
            if block:
                yield "".join(block)
        elif self.format == ".jsonl":
            for number, line in enumerate(self._lines(), 1):
                if line.strip():
                    yield self._json(line, number).get(self.column)
        elif self.format == ".csv":
            csv.field_size_limit(MAX_TEXT_CHARS)
            with self._open() as f:
                try:
                    yield from (row.get(self.column) for row in csv.DictReader(f))
                except csv.Error as e:
                    raise ValueError(f"{self.name}: {e} (a field over {MAX_TEXT_CHARS:,} characters?)") from None
        else:
            yield from self._parquet()

    def __iter__(self) -> Iterator[str]:
        for value in self._raw():
            if not isinstance(value, str):
                continue
            if len(value) > MAX_TEXT_CHARS:
                raise ValueError(f"{self.name}: a text is longer than {MAX_TEXT_CHARS:,} characters")
            try:
                yield check_text(value.strip())
            except ValueError:  # blank
                continue

    def fingerprint(self) -> str:
        """What identifies this input for resumption: path, size, modification time, column."""
        s = self.path.stat()
        return f"{self.path.resolve()}|{s.st_size}|{s.st_mtime_ns}|{self.column}"


def texts_by_id(corpus, ids) -> dict[int, str]:
    """The texts with the given positions in the corpus (one more pass over it)."""
    wanted, found = set(int(i) for i in ids), {}
    for i, text in enumerate(corpus):
        if i in wanted:
            found[i] = text
            if len(found) == len(wanted):
                break
    return found


# ---------------------------------------------------------------- per-text statistics


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


class _Padded:
    """One layer's LayerQKs of a padded batch (one per text, cut to its n_b tokens) as batch tensors, so that
    any rows of every text's weights come from one product and one softmax."""

    def __init__(self, layers: list, T: int):
        first = layers[0]
        H, Dh = first.shape[0], first.q.shape[-1]
        self.layers, self.T = layers, T
        # one batched path when the texts' recipes differ only in length, causality and window (no dense mask or bias)
        self.fast = all(x.mask is None and x.bias is None and x.scaling == first.scaling and x.softcap == first.softcap
                        for x in layers)
        if not self.fast:
            return
        self.q = torch.zeros(len(layers), H, T, Dh)  # (B, H, T, Dh); padding rows stay 0
        self.k = torch.zeros(len(layers), H, T, Dh)  # (B, H, T, Dh)
        for b, x in enumerate(layers):
            n = x.shape[1]
            self.q[b, :, :n] = x.q.float() * first.scaling
            self.k[b, :, :n] = x.k[torch.arange(H) // (H // x.k.shape[0])].float()  # grouped-query keys repeated
        self.n = torch.tensor([x.shape[1] for x in layers])[:, None, None]  # (B, 1, 1)
        self.causal = torch.tensor([x.causal for x in layers])[:, None, None]  # (B, 1, 1)
        far = [x.window if x.window is not None else T + 1 for x in layers]
        self.window = torch.tensor(far)[:, None, None]  # (B, 1, 1)

    def rows(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query rows ``start:stop`` of each text's weights (what ``LayerQK.weights`` gives), zero on the keys past
        its end, (B, H, rows, T) float32; their row entropies and largest weights (B, H, rows). Rows past a text's
        end are filler."""
        B, T, H = len(self.layers), self.T, self.layers[0].shape[0]
        if not self.fast:
            w = torch.zeros(B, H, stop - start, T)
            for b, x in enumerate(self.layers):
                n = x.shape[1]
                if start < n:  # the recipe's own exact path, text by text
                    w[b, :, : min(stop, n) - start, :n] = x.weights(list(range(H)), start, min(stop, n))
            return w, -torch.special.xlogy(w, w).sum(-1), w.amax(-1)
        scores = self.q[:, :, start:stop] @ self.k.transpose(-2, -1)  # (B, H, rows, T)
        softcap = self.layers[0].softcap
        if softcap is not None:
            scores = torch.tanh(scores.div_(softcap)).mul_(softcap)
        i = torch.arange(start, stop)[:, None]  # (rows, 1) query positions (self-attention: Tq = Tk)
        j = torch.arange(T)[None, :]  # (1, T)
        hidden = (j >= self.n) | (self.causal & (j > i)) | (i - j >= self.window)  # (B, rows, T)
        if bool(hidden.any()):
            scores += torch.zeros(hidden.shape).masked_fill_(hidden, HIDDEN)[:, None]  # (B, 1, rows, T)
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
    masks = torch.stack([m.float() for m in keys.values()], dim=-1)[:, None]  # (B, 1, T, K)
    per_row = ("entropy", "entropy_norm", "distance", "max", "prev", "self", "next")
    sums = torch.zeros(len(per_row), B, L, H, dtype=torch.float64)
    shares = torch.zeros(B, L, H, len(keys), dtype=torch.float64)  # (B, L, H, K)
    step = max(1, STATS_TILE_FLOATS // (B * H * T))
    with torch.inference_mode():
        for layer in range(L):
            padded = _Padded([x[layer] for x in layers], T)
            for a in range(0, T, step):
                z = min(a + step, T)
                w, ent, top = padded.rows(a, z)  # (B, H, rows, T), (B, H, rows), (B, H, rows)
                r = torch.arange(a, z)[None, :]  # (1, rows)
                real = r < n  # (B, rows): the text's own queries
                if min(lengths) < z:  # filler rows in this tile: 0, so sums over all rows are over real ones
                    w *= real[:, None, :, None]
                    ent, top = ent * real[:, None], top * real[:, None]
                attendable = (r + 1) if decoder else n  # (B or 1, rows or 1)
                norm = torch.where(real & (attendable > 1), 1 / torch.log(attendable.clamp(min=2).float()), 0)
                gap = (r[0][:, None] - torch.arange(T)[None, :]).abs().float()  # (rows, T)
                rows = torch.stack([ent, ent * norm[:, None], (w * gap).sum(-1), top])  # (4, B, H, rows)
                sums[:4, :, layer] += rows.sum(-1, dtype=torch.float64)
                for s, offset in enumerate((-1, 0, 1), 4):  # α_i,i+offset: 0 where i + offset is past the text
                    sums[s, :, layer] += torch.diagonal(w, a + offset, dim1=-2, dim2=-1).sum(-1, dtype=torch.float64)
                shares[:, layer] += (w.sum(2, keepdim=True) @ masks)[:, :, 0]  # (B, H, K): weight each key receives, by mask
    nb = n.double()[:, :, None]  # (B, 1, 1)
    count = {"entropy_norm": nb - 1 if decoder else torch.where(nb > 1, nb, 0), "prev": nb - 1, "next": nb - 1}
    totals = {**dict(zip(per_row, sums)), **dict(zip(keys, shares.permute(3, 0, 1, 2)))}
    return {name: torch.where(count.get(name, nb) > 0, total / count.get(name, nb).clamp(min=1), total).numpy()
            for name, total in totals.items()}


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


# ---------------------------------------------------------------- running a job

JOB_VERSION = 2  # what a job.json records; another version starts the job afresh


def shard_dir(out) -> Path:
    return Path(str(out) + ".shards")


def write_private(path: Path, data: bytes, pause: float = 0.0) -> None:
    """``data`` to ``path`` whole or not at all: a 0600 temporary file in the same folder, synced, then renamed
    into place (atomic on POSIX). ``pause``: seconds to wait half-written (a test kills the writer there)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(data[: len(data) // 2])
            if pause:
                f.flush()
                time.sleep(pause)
            f.write(data[len(data) // 2:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class _Job:
    """A job's folder: ``job.json`` (what the job runs, and each finished shard's texts, length and checksum) and
    its shards, each of which also names its job and texts."""

    def __init__(self, folder: Path, fingerprint: dict | None = None, note: Callable[[str], None] = lambda line: None):
        """Open the job in ``folder``: one for ``fingerprint`` (another job's, or a damaged record, starts afresh),
        or, without one, as it is (nothing is changed)."""
        self.folder, self.meta = folder, folder / "job.json"
        record = self._read(note if fingerprint is not None else lambda line: None)
        if fingerprint is None:
            self.record = record or {"job": "", "shards": {}, "finished": False}
            return
        if record is None or record.get("fingerprint") != fingerprint:
            if folder.is_dir():
                shutil.rmtree(folder)
            record = {"fingerprint": fingerprint, "job": digest(json.dumps(fingerprint, sort_keys=True).encode()),
                      "shards": {}, "finished": False}
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for leftover in folder.glob(".*.tmp"):  # a write that was killed before its rename
            leftover.unlink(missing_ok=True)
        self.record = record
        self.write()

    def _read(self, note) -> dict | None:
        if not self.folder.is_dir():
            return None
        try:
            record = json.loads(self.meta.read_text(encoding="utf-8"))
            if not (isinstance(record, dict) and isinstance(record.get("shards"), dict)
                    and isinstance(record.get("job"), str)):
                raise ValueError("not a job record")
            return record
        except FileNotFoundError:
            if any(self.folder.glob("shard-*.npz")):
                note("job.json is missing: starting the job afresh")
        except (OSError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            note("job.json is damaged: starting the job afresh")
        return None

    @property
    def id(self) -> str:
        return self.record["job"]

    def write(self) -> None:
        write_private(self.meta, json.dumps(self.record).encode())

    def path(self, s: int) -> Path:
        return self.folder / f"shard-{s:05d}.npz"

    def check(self, s: int, ids) -> tuple[dict | None, str | None]:
        """(shard ``s``'s arrays, None) when it holds exactly texts ``ids`` of this job, whole; else (None, why it
        must be computed again; None when it was simply never written)."""
        path, rec = self.path(s), self.record["shards"].get(str(s))
        if not path.is_file():
            return None, "is missing" if rec else None
        data = path.read_bytes()
        if not data:
            return None, "is empty"
        if rec is None:
            return None, "was never recorded as finished"
        if len(data) < rec.get("bytes", 0):
            return None, f"is cut short ({len(data):,} of {rec['bytes']:,} bytes)"
        try:
            with np.load(io.BytesIO(data)) as f:
                arrays = {k: f[k] for k in f.files}
        except Exception:  # a damaged zip, a truncated member: any failure to read means "compute it again"
            return None, "cannot be read"
        got = arrays.get("ids", np.empty(0, np.int64))
        if str(arrays.get("job", "")) != self.id:
            return None, "belongs to another job"
        if len(got) != len(ids) or not np.array_equal(got, ids):
            held = f"texts {got[0]:,}–{got[-1]:,}" if len(got) else "no texts"
            return None, f"holds {held}, not {ids[0]:,}–{ids[-1]:,}"
        if len(data) != rec.get("bytes") or hashlib.sha256(data).hexdigest() != rec.get("sha256"):
            return None, "fails its checksum"
        if not set(NAMES) <= set(arrays):
            return None, "lacks statistics"
        return arrays, None

    def save(self, s: int, ids, stats: dict) -> None:
        """Shard ``s`` whole, then its record in job.json."""
        buf = io.BytesIO()
        np.savez(buf, ids=np.asarray(ids, np.int64), job=np.array(self.id), **stats)
        data = buf.getvalue()
        write_private(self.path(s), data, pause=settings.shard_write_pause())
        self.record["shards"][str(s)] = {"first": int(ids[0]), "n": len(ids), "bytes": len(data),
                                         "sha256": hashlib.sha256(data).hexdigest()}
        self.write()

    def done(self) -> Iterator[dict]:
        """The arrays of every recorded shard that passes its checks, in corpus order."""
        for key, rec in sorted(self.record["shards"].items(), key=lambda kv: int(kv[0])):
            arrays, _ = self.check(int(key), np.arange(rec["first"], rec["first"] + rec["n"]))
            if arrays is not None:
                yield arrays


def load_shards(shards: Path, model: str) -> CorpusStats:
    """Every finished shard of a job that passes its checks, in corpus order (a ValueError when none has)."""
    parts = list(_Job(Path(shards)).done())
    if not parts:
        raise ValueError("no shard has finished yet")
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("ids", "n_tokens", *NAMES)}
    return CorpusStats(model, cat.pop("ids"), cat.pop("n_tokens"), {name: cat[name] for name in NAMES})


def finished(out, stats: CorpusStats | None = None) -> bool:
    """Whether the job kept at ``shard_dir(out)`` ran to its end (and, given what ``load_shards`` read from it,
    whether every shard it recorded is still there whole)."""
    record = _Job(shard_dir(out)).record
    whole = stats is None or stats.n_texts == sum(r["n"] for r in record["shards"].values())
    return bool(record.get("finished")) and whole


def _shards(corpus, limit: int | None, shard_texts: int,
            shard_chars: int) -> Iterator[tuple[int, list[int], list[str]]]:
    """(shard number, text ids, texts), streamed: a shard ends at ``shard_texts`` texts or ``shard_chars``
    characters, whichever comes first."""
    s, ids, texts, chars = 0, [], [], 0
    for i, text in enumerate(corpus):
        if limit is not None and i >= limit:
            break
        ids.append(i)
        texts.append(text)
        chars += len(text)
        if len(texts) == shard_texts or chars >= shard_chars:
            yield s, ids, texts
            s, ids, texts, chars = s + 1, [], [], 0
    if texts:
        yield s, ids, texts


def run(model: str, path, out, column: str | None = None, limit: int | None = None, ray_address: str | None = None,
        shard_texts: int = SHARD_TEXTS, batch_texts: int = BATCH_TEXTS,
        progress: Callable[[int], None] | None = None, backend=None, max_tokens: int | None = None,
        tick: Callable[[int], None] | None = None, note: Callable[[str], None] | None = None,
        totals: Totals | None = None, shard_chars: int = SHARD_CHARS) -> CorpusStats:
    """Run ``model`` over the corpus at ``path`` (or a ``Corpus``) and return its per-text statistics.

    Shards are kept under ``shard_dir(out)``; a rerun of the same job keeps the finished ones that pass their
    checks and computes the others again, telling ``note(line)`` which and why. ``progress(texts_done)`` is
    called after each shard, with ``totals`` (when given) holding the running sums so far; ``tick(texts_done)``
    before every batch, where a caller can raise to stop. Texts are cut to ``max_tokens`` (default: the model's
    limit). ``ray_address`` ("auto" or an address) runs the batches on Ray; ``backend`` is ``model`` already
    loaded (the app's cached one), else it is loaded here.
    """
    corpus = path if isinstance(path, Corpus) else Corpus(path, column)
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be at least 1, not {limit}")
    say = note or (lambda line: None)
    job = _Job(shard_dir(out), {"model": model, "input": corpus.fingerprint(), "limit": limit,
                                "shard_texts": shard_texts, "shard_chars": shard_chars, "max_tokens": max_tokens,
                                "version": JOB_VERSION}, say)
    done, todo = 0, set()
    for s, ids, _ in _shards(corpus, limit, shard_texts, shard_chars):  # first pass: which shards stand
        arrays, why = job.check(s, ids)
        if arrays is None:
            todo.add(s)
            if why:
                say(f"shard {s} (texts {ids[0]:,}–{ids[-1]:,}) {why}: computing it again")
            continue
        done += len(ids)
        if totals is not None:
            totals.add(arrays)
    pending = ((s, ids, texts) for s, ids, texts in _shards(corpus, limit, shard_texts, shard_chars) if s in todo)

    def ticks(base: int) -> Callable[[int], None] | None:
        return None if tick is None else lambda k: tick(base + k)

    if ray_address:
        from .ray import run_shards

        finished_ = run_shards(model, pending, ray_address, batch_texts, max_tokens=max_tokens, tick=ticks(done))
    else:
        backend = backend or open_model(model)
        finished_ = ((s, ids, text_stats(backend, texts, batch_texts, max_tokens, ticks(done)))
                     for s, ids, texts in pending)
    for s, ids, stats in finished_:
        job.save(s, ids, stats)
        done += len(ids)
        if totals is not None:
            totals.add(stats)
        if progress is not None:
            progress(done)
    job.record["finished"] = True
    job.write()
    return load_shards(job.folder, model)


def write(stats: CorpusStats, out, corpus: Corpus | None = None, by: str = "max", k: int = 5) -> list[Path]:
    """The per-head table to ``out`` (.parquet or .csv) and the top texts per head beside it (``<stem>.top<ext>``)."""
    out = Path(out)
    write_table(stats.table(), out)
    top = stats.top(by, k)
    texts = texts_by_id(corpus, top["text_id"].unique()) if corpus is not None else None
    top = stats.top(by, k, texts)
    top_path = out.with_name(f"{out.stem}.top{out.suffix}")
    write_table(top, top_path)
    return [out, top_path]


def keep_top_texts(stats: CorpusStats, corpus: Corpus, out, k: int = 5, max_chars: int = 4000) -> None:
    """Save beside the job the texts that rank among any head's k highest or lowest on any statistic (cut to
    ``max_chars``), so its results can show them once the corpus file itself is gone (``top_texts``)."""
    ids = {int(i) for name in NAMES for i in stats.top(name, k)["text_id"]}
    texts = {str(i): t[:max_chars] for i, t in texts_by_id(corpus, ids).items()}
    write_private(shard_dir(out) / "texts.json", json.dumps(texts, ensure_ascii=False).encode())


def job_bytes(n_texts: int, n_heads: int, corpus_bytes: int) -> int:
    """At most the disk a job over ``n_texts`` texts keeps, for a model of ``n_heads`` heads (layers × heads) and a
    corpus of ``corpus_bytes`` of text: float32 statistics per head and text, each shard's zip overhead, job.json,
    and its top texts (at most the corpus itself)."""
    shards = n_texts // SHARD_TEXTS + corpus_bytes // SHARD_CHARS + 2
    return n_texts * (n_heads * len(NAMES) * 4 + 32) + shards * 8192 + min(corpus_bytes, n_texts * 16_000) + 65_536


def top_texts(out) -> dict[int, str]:
    """The texts ``keep_top_texts`` saved for the job of ``out`` (empty when none were)."""
    try:
        return {int(i): t for i, t in json.loads((shard_dir(out) / "texts.json").read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def estimate(done: int, total: int | None, started: float, done_at_start: int = 0) -> float | None:
    """Seconds left at the rate since ``started`` (None until there is a rate, or without a total)."""
    rate = (done - done_at_start) / max(time.monotonic() - started, 1e-9)
    return None if not total or rate <= 0 else (total - done) / rate


def count(corpus, limit: int | None = None) -> int:
    """How many texts a run will take (one pass over the file)."""
    n = 0
    for _ in corpus:
        n += 1
        if limit is not None and n >= limit:
            break
    return n


def digest(data: bytes) -> str:
    """A short name for uploaded bytes: the page keeps an upload's shards under it."""
    return hashlib.sha256(data).hexdigest()[:16]


def trim(work, budget: int, keep=()) -> int:
    """Remove what folder ``work`` holds past ``budget`` bytes, never a path in ``keep``: stray files (uploads no
    session holds) first, then finished jobs, then unfinished ones, oldest first. Returns the bytes it still holds."""
    work, keep = Path(work), {Path(k) for k in keep}

    def size(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size

    def rank(p: Path) -> tuple:
        jobs = p.is_dir() and p.name.endswith(".shards")
        age = (p / "job.json").stat().st_mtime if jobs and (p / "job.json").exists() else p.stat().st_mtime
        return (jobs, jobs and not _Job(p).record.get("finished"), age)

    entries = {p: size(p) for p in work.iterdir()} if work.is_dir() else {}
    used = sum(entries.values())
    for p in sorted((p for p in entries if p not in keep), key=rank):
        if used <= budget:
            break
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        used -= entries[p]
    return used
