"""Where one layer of the long view's traced forward (the Attention page past 256 tokens) spends its time against
the fused attention it replaces: ``builtin:seed``'s shapes (8 heads of 64) at 4,096 tokens, in the page's tiles of query rows over every key.

Torch's fused SDPA (what the bare forward runs) beside the explicit path's parts, each over all of the layer's tiles:
the scores' product, the softmax, the output's product, and the survey's reductions (``Reducer``); then the whole
layer as the page runs it (``LayerQK.output`` feeding a ``Reducer``). The two products are the FLOPs SDPA does too;
the softmax written out and the survey's passes over every tile are what a kernel fusing them would save.

Run: ``python bench/attention_tile.py [T]`` (default 4096). Writes bench/out/attention_tile.json.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from common import compare, conditions, ratio, save, table

from attnviz.analysis.long import Reducer
from attnviz.core.weights import LayerQK

H, DH = 8, 64


def parts(T: int) -> dict:
    torch.manual_seed(0)
    # (H, T, Dh) views of a (T, H·Dh) projection, as a forward captures them
    q, k, v = (torch.randn(T, H * DH).view(T, H, DH).transpose(0, 1) for _ in range(3))
    layer = LayerQK(q, k, DH ** -0.5)
    rows = Reducer().layer(H, T)[0]  # the page's query rows per tile
    starts = range(0, T, rows)
    if T % rows:
        raise ValueError(f"{T} tokens are not whole tiles of {rows} rows: every part here times whole tiles")
    heads = list(range(H))
    w = torch.softmax(layer.scores(heads, 0, rows, 0, T), -1)  # (H, rows, T) one tile of weights
    values = v[torch.arange(H)]  # (H, T, Dh) gathered per query head, contiguous, as LayerQK.output does

    def survey():
        _, visit, _ = Reducer().layer(H, T)
        for a in starts:
            visit(w, a)

    fns = {
        "SDPA (fused: scores, softmax, output)": lambda: F.scaled_dot_product_attention(q[None], k[None], v[None]),
        "scores (q kᵀ, into the tile)": lambda: [layer.scores(heads, a, a + rows, 0, T, out=w) for a in starts],
        "softmax, in place": lambda: [torch.softmax(w, -1, out=w) for _ in starts],
        "output (weights · v)": lambda: [w @ values for _ in starts],
        "survey (pooled maps, received, distances)": survey,
        "the page's layer (LayerQK.output + Reducer)": lambda: layer.output(v, *Reducer().layer(H, T)),
    }
    with torch.inference_mode():
        t = compare(fns, repeat=9, warmup=2)
    base = t["SDPA (fused: scores, softmax, output)"]
    return {"tokens": T, "rows_per_tile": rows, "tiles": len(starts),
            "parts": {name: {"ms_per_tile": r["median_s"] * 1e3 / len(starts), "of_sdpa": ratio(r, base)}
                      for name, r in t.items()}}


def report(res: dict) -> str:
    rows = [[name, f"{p['ms_per_tile']:.2f}", f"{p['of_sdpa']:.2f}×"] for name, p in res["parts"].items()]
    return table(f"One layer at {res['tokens']:,} tokens, {H} heads: {res['tiles']} tiles of {res['rows_per_tile']} "
                 "query rows (medians of 9 interleaved rounds)", ["part", "ms per tile", "× SDPA"], rows)


if __name__ == "__main__":
    res = {"conditions": conditions(), **parts(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)}
    save("attention_tile", res)
    print(report(res))
