"""Corpus mode: every head's statistics over thousands of texts, as distributions, with the texts that stand out.

``read`` streams a corpus file within budgets, ``stats`` turns padded batches of texts into per-text head
statistics, ``job`` runs a resumable job of atomic shards, ``ray`` runs the same batches on a Ray cluster.
"""

from .job import (estimate, finished, job_bytes, keep_top_texts, load_shards, run, shard_dir, top_texts, trim, write,
                  write_private)
from .read import FORMATS, MAX_TEXT_CHARS, Corpus, count, digest, texts_by_id
from .stats import CATEGORIES, NAMES, CorpusStats, Totals, batchable, categories, text_stats, trace_stats

__all__ = ["CATEGORIES", "FORMATS", "MAX_TEXT_CHARS", "NAMES", "Corpus", "CorpusStats", "Totals", "batchable",
           "categories", "count", "digest", "estimate", "finished", "job_bytes", "keep_top_texts", "load_shards", "run",
           "shard_dir", "text_stats", "texts_by_id", "top_texts", "trace_stats", "trim", "write", "write_private"]
