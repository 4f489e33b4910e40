"""Where the trace's time goes, for a built-in model at one length: tokenizing, the bare forward,
the statistics, packing the arrays into an AttentionTrace; then the torch operators that differ.

Run: ``python bench/profile_trace.py [builtin:minilm] [512]``. Writes bench/out/profile_trace.json.
"""

from __future__ import annotations

import sys
from collections import Counter

import torch

from common import builtin_bare, compare, conditions, ms, repeats, save, table, text_of, tokenizer

import attnviz
from attnviz.backends.common import encode
from attnviz.capture.record import record


def stages(key: str = "builtin:minilm", n: int = 512) -> dict:
    """Median seconds of each stage of ``trace``, run in turn so that load hits them alike."""
    backend = attnviz.load(key)
    text = text_of(tokenizer(), n)
    ids = torch.tensor([encode(backend.tokenizer, text, backend.max_tokens).ids])  # (1, T)

    bare = builtin_bare(backend.net)

    def forward(recorded):
        """The forward alone (SDPA, nothing kept), or recorded: queries, keys and norm statistics kept."""
        if not recorded:
            return bare(ids)
        with torch.inference_mode(), record(backend.net):
            return backend.net(ids)

    t = compare({
        "tokenize": lambda: encode(backend.tokenizer, text, backend.max_tokens),
        "bare forward": lambda: forward(False),
        "forward recorded": lambda: forward(True),
        "trace": lambda: backend.trace(text),
    }, 2 * repeats(n), warmup=2)
    out = {"model": key, "tokens": n, "ops": operator_diff(forward)}
    for stat in ("median_s", "min_s"):  # the minimum is the one least disturbed by other processes
        s = {k: v[stat] for k, v in t.items()}
        s["recording (q, k, norm hooks)"] = s["forward recorded"] - s["bare forward"]
        s["packing (numpy, AttentionTrace)"] = s["trace"] - s["forward recorded"] - s["tokenize"]
        out[stat] = s
    return out


def operator_diff(forward) -> list[dict]:
    """Self CPU ms per torch operator in the bare forward and in the recorded forward."""
    from torch.profiler import ProfilerActivity, profile

    per = {}
    for stats in (False, True):
        forward(stats)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            forward(stats)
        per[stats] = Counter({e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()})
    names = sorted(set(per[False]) | set(per[True]), key=lambda k: -per[True][k])
    return [{"op": k, "bare_ms": per[False][k], "stats_ms": per[True][k]} for k in names if per[True][k] >= 1][:15]


def report(result: dict) -> str:
    med, low = result["median_s"], result["min_s"]
    rows = [[k, ms(med[k]), f"{med[k] / med['bare forward']:.2f}", ms(low[k]), f"{low[k] / low['bare forward']:.2f}"]
            for k in med]
    out = table(f"Trace stages, {result['model']} at {result['tokens']} tokens",
                ["stage", "median ms", "× bare", "min ms", "× bare"], rows)
    ops = [[r["op"], f"{r['bare_ms']:.1f}", f"{r['stats_ms']:.1f}"] for r in result["ops"]]
    return out + table("Torch operators, self CPU ms (one run)", ["operator", "bare", "with stats"], ops)


if __name__ == "__main__":
    key = sys.argv[1] if len(sys.argv) > 1 else "builtin:minilm"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    res = {"conditions": conditions(), **stages(key, n)}
    save("profile_trace", res)
    print(report(res))
