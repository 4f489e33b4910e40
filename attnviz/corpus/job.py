"""A corpus job: every head's statistics over thousands of texts, as distributions, with the texts that stand out.

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

import hashlib
import io
import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .. import settings
from ..backends import open_model
from .read import Corpus, digest, texts_by_id
from .stats import BATCH_TEXTS, NAMES, CorpusStats, Totals, text_stats, write_table

SHARD_TEXTS = 256
SHARD_CHARS = 1 << 17

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




def trim(work, budget: int, keep=()) -> int:
    """Make folder ``work`` hold at most ``budget`` bytes, never removing a path in ``keep``: stray files (uploads no
    session holds) first, then finished jobs, then unfinished ones, least recently used first (a folder's time is
    its last write or view). When removing everything it may would still leave more than ``budget``, it removes
    nothing. Returns the bytes it still holds."""
    work, keep = Path(work), {Path(k) for k in keep}

    def size(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size

    def rank(p: Path) -> tuple:
        jobs = p.is_dir() and p.name.endswith(".shards")
        return (jobs, jobs and not _Job(p).record.get("finished"), p.stat().st_mtime)

    entries = {p: size(p) for p in work.iterdir()} if work.is_dir() else {}
    used = sum(entries.values())
    free = sorted((p for p in entries if p not in keep), key=rank)
    if used - sum(entries[p] for p in free) > budget:  # cannot fit whatever goes: nobody loses anything
        return used
    for p in free:
        if used <= budget:
            break
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        used -= entries[p]
    return used
