"""A long forward stopped half-way and run again (issue 57): what a rerun costs when the survey layers read before
the Stop are kept (``Reducer(kept=…)``: those layers attend on their fast path and are not read again), against an
uninterrupted traced forward and a plain trace with no survey (the part a rerun cannot keep: the trace is made by
the whole forward), and how far the resumed survey lies from the uninterrupted one.

Run: ``python bench/long_resume.py [tokens] [rounds]`` (default 4096 2; the stopped forward warms up), builtin:seed.
Writes bench/out/long_resume.json.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from common import DETAIL, app_malloc, conditions, save, table, text_of, tokenizer

import attnviz
from attnviz.analysis import long

app_malloc()


class Stop(Exception):
    """What Streamlit's Stop raises in a job's checkpoint."""


def stopped_at(model, text: str, n: int, layers: int) -> list:
    """The whole layers a forward keeps when stopped as it starts layer ``layers``."""
    def progress(fraction):
        if fraction * model.n_layers > layers:
            raise Stop

    reducer = long.Reducer(DETAIL, model.n_layers, progress)
    try:
        long.trace_with_survey(model, text, n, reducer=reducer)
    except Stop:
        return reducer.whole()
    raise AssertionError("the forward was not stopped")


def measure(n: int = 4096, rounds: int = 2) -> dict:
    model = attnviz.load("builtin:seed")
    text, L = text_of(tokenizer(), n), model.n_layers
    kept = stopped_at(model, text, n, L // 2)
    runs: dict = {}
    for _ in range(rounds):
        t = time.perf_counter()
        model.trace(text, max_tokens=n)
        plain = time.perf_counter() - t
        t = time.perf_counter()
        _, whole = long.trace_with_survey(model, text, n, DETAIL)
        full = time.perf_counter() - t
        t = time.perf_counter()
        _, resumed = long.trace_with_survey(model, text, n, reducer=long.Reducer(DETAIL, L, kept=kept))
        rerun = time.perf_counter() - t
        for k, v in (("plain trace (no survey)", plain), ("traced forward (survey inside)", full),
                     (f"rerun with {len(kept)} of {L} layers kept", rerun)):
            runs.setdefault(k, []).append(v)
    a, b = whole.result(), resumed.result()
    diff = max(float(np.abs(np.asarray(x) - np.asarray(y)).max())
               for name in ("layer_max", "received", "distance") for x, y in [(getattr(a, name), getattr(b, name))])
    diff = max(diff, *(float(np.abs(a.pooled("detail", r) - b.pooled("detail", r)).max()) for r in ("max", "mean")))
    return {"tokens": n, "layers": L, "kept": len(kept), "times_s": runs,
            "median_s": {k: statistics.median(v) for k, v in runs.items()}, "max_abs_diff": diff,
            "conditions": conditions()}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    r = measure(*args)
    save("long_resume", r)
    print(table(f"{r['tokens']:,} tokens of builtin:seed, median of {len(next(iter(r['times_s'].values())))}",
                ["step", "median s"], [[k, f"{v:.2f}"] for k, v in r["median_s"].items()]))
    print(f"survey arrays, resumed against uninterrupted: max |diff| {r['max_abs_diff']:.3g}")
