"""What an edited run costs beside a plain trace: builtin:lm on the probe, builtin:minilm at 128 and 512 tokens.

Every layer of an intervention run attends explicitly (weights @ values, so a run and its edited twin differ by
the edit alone); this measures that price, and head patching's L·H + 2 forwards.
Run: ``python bench/interventions.py``. Writes bench/out/interventions.json. BENCH_QUICK=1 repeats less.
"""

from __future__ import annotations

from common import compare, conditions, ms, quick, save, table, text_of, tokenizer

import attnviz
from attnviz.analysis.roles import repeated_tokens
from attnviz.analysis.interventions import Knockout, LogitDiff, patch_heads, run


def lm_timings() -> dict:
    lm = attnviz.load("builtin:lm")
    ids = repeated_tokens(lm.plain_ids(), 50, 0)  # 101 tokens with [BOS]
    clean = ids[:50] + ids[:30]
    corrupted = [*clean[:30], next(i for i in lm.plain_ids() if i not in ids), *clean[31:]]
    metric = LogitDiff(lm.vocab.itos[clean[30]], lm.vocab.itos[corrupted[30]])
    return compare({
        "trace (for scale)": lambda: lm.trace_ids(ids),
        "run, no edits (one forward)": lambda: run(lm, ids, []),
        "run, 2 knock-outs (two forwards)": lambda: run(lm, ids, [Knockout(1, 0), Knockout(1, 1)]),
        "patch_heads, 4 heads (6 forwards, 81 tokens)": lambda: patch_heads(lm, clean, corrupted, metric),
    }, 3 if quick() else 10)


def encoder_timings(n: int) -> dict:
    enc = attnviz.load("builtin:minilm")
    text = text_of(tokenizer(), n)
    return compare({
        "trace (for scale)": lambda: enc.trace(text),
        "run, no edits (one forward)": lambda: run(enc, text, []),
        "run, 1 knock-out (two forwards)": lambda: run(enc, text, [Knockout(2, 5)]),
    }, 2 if quick() else 5)


if __name__ == "__main__":
    res = {"conditions": conditions(), "builtin:lm probe": lm_timings(),
           **{f"builtin:minilm {n}": encoder_timings(n) for n in (128, 512)}}
    save("interventions", res)
    for name, rows in res.items():
        if name != "conditions":
            print(table(f"{name}, ms: median (min)", ["what", "time"],
                        [[k, f"{ms(v['median_s'])} ({ms(v['min_s'])})"] for k, v in rows.items()]))
            print()
    print(f"conditions: {res['conditions']}")
