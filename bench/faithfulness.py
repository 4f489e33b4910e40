"""Which explanation agrees with what the model does? Mean Spearman (with occlusion) and AOPC per method, over
generated sentiment reviews (builtin:classifier) and English sentences (builtin:minilm); and how long it takes.

Run: ``python bench/faithfulness.py``. BENCH_QUICK=1 takes fewer texts.
"""

from __future__ import annotations

import time

import pandas as pd
from common import quick

import attnviz
from attnviz.analysis.faithfulness import agreement, explain
from attnviz.analysis.interventions import ZeroValue, editing
from attnviz.data.samples import GENERAL
from attnviz.training.tasks import Sentiment

SENTENCES = [*GENERAL.values(), "The cat sat on the mat because it was tired.",
             "She said the results were surprising, but nobody believed her.",
             "Paris is the capital of France, and Berlin is the capital of Germany."]


def measure(key: str, texts: list[str]) -> tuple[pd.DataFrame, float, int]:
    """(mean and spread of each method's Spearman and AOPC over ``texts``, seconds per text, mean tokens)."""
    model = attnviz.load(key)
    tables, tokens, start = [], [], time.perf_counter()
    for text in texts:
        e = explain(model, text, zero_value=lambda j: editing([ZeroValue(j)]))
        tables.append(agreement(e))
        tokens.append(len(e.tokens))
    seconds = (time.perf_counter() - start) / len(texts)
    stats = pd.concat(tables).groupby("method", sort=False).agg(
        spearman=("spearman", "mean"), spearman_sd=("spearman", "std"), aopc=("aopc", "mean"), aopc_sd=("aopc", "std"))
    return stats, seconds, round(sum(tokens) / len(tokens))


def main() -> None:
    reviews = [ex.text for ex in Sentiment().examples(8 if quick() else 24, seed=7)]
    for key, texts in (("builtin:classifier", reviews), ("builtin:minilm", SENTENCES[: 3 if quick() else None])):
        stats, seconds, tokens = measure(key, texts)
        print(f"\n{key}: {len(texts)} texts, {tokens} tokens on average, {seconds:.2f} s per explanation")
        print(stats.round(3).to_string())


if __name__ == "__main__":
    main()
