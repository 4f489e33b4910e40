"""The Attention page's long view (past 256 tokens), server side, at 4,096 and 16,384 tokens of ``builtin:seed``:
the forward (trace), the forward with the survey of every head read inside it (``long.trace_with_survey``, the page's path),
the survey as a pass after a forward (a model held eager) against ``t.pooled(256)``, a token's column (a layer's first, then another),
a 256-token window, the page's figure bytes, and peak memory against what Hugging Face eager attention would
hold (L·H·T² floats).

Run: ``python bench/long_text.py [lengths…]`` (default 4096 16384). Each length runs in a fresh child process,
so peak RSS is its own. Writes bench/out/long_text.json. The browser's submit → drawn is not measured here.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

from common import conditions, mb, save, table, text_of, tokenizer

LENGTHS = (4096, 16384)


def child(n: int) -> dict:
    import numpy as np

    import attnviz
    from attnviz.analysis import long
    from attnviz.figures import long as figs

    model = attnviz.load("builtin:seed")
    text = text_of(tokenizer(), n)
    out = {}
    t0 = time.perf_counter()
    t = model.trace(text, max_tokens=n)
    out["trace_s"] = time.perf_counter() - t0
    L, H = t.n_layers, t.n_heads
    t0 = time.perf_counter()
    _, reducer = long.trace_with_survey(model, text, n, 256)
    reducer.result(figs.overview_size(L, H))
    out["traced_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = long.survey(t.weights, figs.overview_size(L, H), 256)
    out["survey_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    t.pooled(256)
    out["pooled_256_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    col = t.column(3, 2, n // 2)
    out["column_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    t.column(3, 5, n // 3)  # the same layer: its rows' normalisers are known
    out["column_next_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    w = long.window(t.weights, 3, 2, n // 2, n // 2 + 256)
    out["window_256_s"] = time.perf_counter() - t0
    row = t.row(3, 2, n // 2)
    sizes = {
        "overview": figs.head_mosaic(s.pooled("overview", "max"), "max", n, s.block("overview"), (3, 2)),
        "blocks": figs.blocks_heatmap(s.pooled("detail", "max")[3, 2], s.starts["detail"], s.block("detail"), n, "", "max"),
        "window": figs.window_heatmap(w, n // 2, t.tokens, ""),
        "reach": figs.reach_lines(row, col, n // 2, "x", ""),
        "received": figs.received_line(s.received[3, 2], n, ""),
        "sinks": figs.sink_grid(long.first_token_share(s), long.SINK_SHARE),
        "distance": figs.distance_profile(s.distance[3], long.distance_labels(s.edges), ""),
    }
    out["bytes"] = {k: len(f.to_json()) for k, f in sizes.items()}
    out["bytes"]["reach_html"] = len(figs.reach_html(t.tokens, t.word_ids, row, n // 2))
    out["bytes_total"] = sum(out["bytes"].values())
    out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["eager_attentions"] = L * H * n * n * 4  # what output_attentions would hold, float32
    out["tokens"] = t.n_tokens
    assert np.isfinite(col).all()
    return out


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(int(sys.argv[2]))))
        return
    lengths = [int(a) for a in sys.argv[1:]] or LENGTHS
    results = {}
    for n in lengths:
        done = subprocess.run([sys.executable, __file__, "--child", str(n)], capture_output=True, text=True, check=True)
        results[n] = json.loads(done.stdout.strip().splitlines()[-1])
    rows = [[f"{n:,}", f"{r['trace_s']:.1f} s", f"{r['traced_s']:.1f} s", f"{r['survey_s']:.1f} s",
             f"{r['pooled_256_s']:.1f} s", f"{r['column_s']:.2f} s", f"{r['column_next_s'] * 1e3:.0f} ms",
             f"{r['window_256_s']:.2f} s", mb(r["bytes_total"]), mb(r["peak_rss"]), mb(r["eager_attentions"])]
            for n, r in results.items()]
    print(table("Attention page past 256 tokens, builtin:seed",
                ["tokens", "trace", "trace with the survey inside", "survey after a trace", "t.pooled(256)",
                 "a layer's first column", "another column", "window 256", "page figures (MB)", "peak RSS (MB)",
                 "eager weights (MB)"], rows))
    save("long_text", {"conditions": conditions(), "results": results})


if __name__ == "__main__":
    main()
