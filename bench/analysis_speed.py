"""How long each analysis takes on builtin:minilm at 128 and 512 tokens (flow at its limit, 64 tokens).

Run: ``python bench/analysis_speed.py``. Writes bench/out/analysis_speed.json. BENCH_QUICK=1 repeats less.
"""

from __future__ import annotations

from common import compare, conditions, ms, quick, save, table, text_of, tokenizer

import attnviz
from attnviz.analysis import FLOW_MAX_TOKENS, attention_flow, head_importance, head_stats, head_table, rollout

KEY = "builtin:minilm"
LENGTHS = (FLOW_MAX_TOKENS, 128, 512)


def timings(n: int) -> dict:
    """Median and min seconds of each analysis at ``n`` tokens; None where it does not run."""
    backend = attnviz.load(KEY)
    text = text_of(tokenizer(), n)
    trace = backend.trace(text)
    assert trace.n_tokens == n
    fast = {
        "trace (for scale)": lambda: backend.trace(text),
        "head statistics": lambda: head_stats(trace),
        "head table": lambda: head_table(head_stats(trace)),
        "rollout": lambda: rollout(trace.attentions),
    }
    if n <= FLOW_MAX_TOKENS:
        fast["flow into one token, every layer"] = lambda: attention_flow(trace.attentions, 0)
    out = compare(fast, 2 if quick() else 5)
    # One forward pass per head: long enough that one run is the measurement.
    out["ablation, every head"] = compare({"a": lambda: head_importance(backend, text)}, 1, warmup=0)["a"]
    out["ablation forward passes"] = backend.n_layers * backend.n_heads + 1
    return out


def report(results: dict) -> str:
    names = [k for k in results[str(LENGTHS[0])] if isinstance(results[str(LENGTHS[0])][k], dict)]
    rows = []
    for name in names:
        cells = []
        for n in LENGTHS:
            t = results[str(n)].get(name)
            cells.append(f"{ms(t['median_s'])} ({ms(t['min_s'])})" if t else f"— (limit {FLOW_MAX_TOKENS})")
        rows.append([name, *cells])
    return table(f"Analyses on {KEY}, ms: median (min)", ["analysis", *(f"{n} tokens" for n in LENGTHS)], rows)


if __name__ == "__main__":
    res = {"conditions": conditions(), **{str(n): timings(n) for n in LENGTHS}}
    save("analysis_speed", res)
    print(report(res))
    print(f"\nAblation runs {res['512']['ablation forward passes']} forward passes; conditions: {res['conditions']}")
