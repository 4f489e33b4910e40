"""Corpus mode on Ray: the same padded batches in a Ray Data actor pool, each actor loading the model once.

Optional: ``pip install -r requirements-ray.txt``. Every node needs attnviz installed (the same version as the
driver). The driver holds the pending texts (a few MB per 10,000) and sends them with their corpus positions;
results come back as they finish and are regrouped by shard, so shards are written (and resumed) exactly as
in-process.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np

from ..backends import open_model
from .stats import text_stats


class StatsActor:
    """A Ray Data actor: loads the model once, then turns batches of texts into their statistics."""

    def __init__(self, model: str, batch_texts: int, max_tokens: int | None = None):
        self.backend, self.batch_texts, self.max_tokens = open_model(model), batch_texts, max_tokens

    def __call__(self, batch: dict) -> dict:
        stats = text_stats(self.backend, [str(t) for t in batch["text"]], self.batch_texts, self.max_tokens)
        return {"id": batch["id"], "shard": batch["shard"], **stats}


def connect(address: str) -> None:
    """Join the cluster at ``address`` ("auto": a local one, or the one ``ray start`` made); a running
    ``ray.init`` in this process is used as it is."""
    import ray

    if not ray.is_initialized():
        ray.init(address=None if address == "auto" else address, include_dashboard=False)


def workers() -> int:
    """One actor per CPU of the cluster."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def run_shards(model: str, pending: Iterable, address: str, batch_texts: int, actors: int | None = None,
               max_tokens: int | None = None,
               tick: Callable[[int], None] | None = None) -> Iterator[tuple[int, list[int], dict]]:
    """(shard, ids, stats) for every pending (shard, ids, texts), as each shard's last text comes back; texts are
    cut to ``max_tokens``, and ``tick(texts_back)`` is called as each batch comes back."""
    import ray

    connect(address)
    waiting: dict[int, list[int]] = {}
    items = []
    for shard, ids, texts in pending:
        waiting[shard] = list(ids)
        items += [{"id": i, "shard": shard, "text": t} for i, t in zip(ids, texts)]
    if not items:
        return
    n = actors or workers()
    # at least one block per actor, or a short job leaves actors idle (16 texts made one block: one actor worked)
    blocks = max(min(n, len(items)), min(len(items) // batch_texts, 4 * n))
    ds = ray.data.from_items(items, override_num_blocks=blocks)
    results = ds.map_batches(StatsActor, fn_constructor_args=(model, batch_texts, max_tokens),
                             batch_size=batch_texts * 4, compute=ray.data.ActorPoolStrategy(size=n), num_cpus=1,
                             batch_format="numpy")
    parts: dict[int, list[dict]] = {s: [] for s in waiting}
    got: dict[int, int] = {s: 0 for s in waiting}
    back = 0
    for batch in results.iter_batches(batch_size=None, batch_format="numpy"):
        back += len(batch["id"])
        if tick is not None:
            tick(back)
        for shard in np.unique(batch["shard"]):
            rows = batch["shard"] == shard
            parts[shard].append({k: v[rows] for k, v in batch.items() if k != "shard"})
            got[shard] += int(rows.sum())
            if got[shard] == len(waiting[shard]):
                yield int(shard), *_ordered(parts.pop(shard), waiting.pop(shard))


def _ordered(parts: list[dict], ids: list[int]) -> tuple[list[int], dict]:
    """One shard's results in corpus order."""
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(cat.pop("id"))
    return ids, {k: v[order] for k, v in cat.items()}
