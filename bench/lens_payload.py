"""What a notebook receives to explore a 1,024-token TransformerLens cache: attnviz's explorer opened on the cache
(``attnviz.from_transformer_lens``: heads on demand from its hook_q/hook_k, or its patterns as they are) beside
CircuitsVis 1.43.3's ``attention_patterns`` on the same cache, the grid TransformerLens users reach for.

CircuitsVis is measured as it is called, one layer per call (``cv.attention.attention_patterns(tokens,
cache["pattern", layer])``): the HTML it returns (the CDN version a notebook online shows; offline it also inlines
its JavaScript bundle, the local version). The explorer: the widget's whole state (script, labels, overview PNG,
the open head's blocks and window), then again after a click on another head. The model is a random
TransformerLens-native bridge with GPT-2 small's 12 heads a layer; the payloads depend on heads and tokens only.

    pip install -r requirements-interop.txt circuitsvis==1.43.3 && python bench/lens_payload.py
"""

import time

import common  # noqa: F401  (puts the repo root on sys.path: the bench runs from a clone, not an install)

import torch
from transformer_lens import TransformerBridge, TransformerBridgeConfig
import transformer_lens.model_bridge.sources.native  # noqa: F401  registers TransformerBridge.boot_native

import attnviz
from common import save

TOKENS = 1024
LAYERS, HEADS = 4, 12


def main() -> None:
    import circuitsvis as cv

    cfg = TransformerBridgeConfig(n_layers=LAYERS, d_model=384, n_ctx=TOKENS, d_head=32, n_heads=HEADS, d_vocab=1000,
                                  act_fn="gelu", seed=0)
    model = TransformerBridge.boot_native(cfg)
    tokens = torch.randint(0, 1000, (1, TOKENS), generator=torch.Generator().manual_seed(0))  # (1, T)
    with torch.inference_mode():
        _, cache = model.run_with_cache(tokens)
    names = [f"t{i}" for i in range(TOKENS)]
    rows = []

    start = time.perf_counter()
    html = cv.attention.attention_patterns(names, cache["pattern", 0][0])  # (H, T, T) of one layer
    took = time.perf_counter() - start
    rows.append(["CircuitsVis attention_patterns, one layer (CDN HTML)", len(html.cdn_src), took])
    rows.append(["CircuitsVis attention_patterns, one layer (offline HTML)", len(html.local_src), took])
    rows.append([f"CircuitsVis, all {LAYERS} layers ({LAYERS} × the layer above, not run)", LAYERS * len(html.cdn_src),
                 LAYERS * took])

    with torch.inference_mode():
        _, patterns = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    for what, trace in [("attnviz explorer, cache with hook_q/hook_k", attnviz.from_transformer_lens(cache, names)),
                        ("attnviz explorer, cache of patterns only", attnviz.from_transformer_lens(patterns, names))]:
        start = time.perf_counter()
        w = attnviz.explorer(trace, 1, 3)
        took = time.perf_counter() - start
        rows.append([f"{what}: opened ({trace.capture}, every layer)", w.state_bytes(), took])
        start = time.perf_counter()
        w.view = {**w.view, "layer": 2, "head": 5}
        rows.append([f"{what}: after a click on another head (whole state)", w.state_bytes(),
                     time.perf_counter() - start])

    print(f"{TOKENS:,} tokens, {LAYERS} layers × {HEADS} heads (random TransformerLens-native bridge)\n")
    print("| what a notebook receives | bytes | MB | build |")
    print("|---|---|---|---|")
    for what, size, took in rows:
        print(f"| {what} | {size:,} | {size / 2**20:.2f} | {took:.2f} s |")
    save("lens_payload", {"tokens": TOKENS, "layers": LAYERS, "heads": HEADS,
                          "rows": [dict(what=w, bytes=b, seconds=t) for w, b, t in rows]})


if __name__ == "__main__":
    main()
