"""Payload: the bytes of every figure the attention page sends, against bertviz 1.4.1's head view and
model view for the same model (all-MiniLM-L6-v2) and the same text, built in the same run.

Run: ``python bench/payload.py``. Writes bench/out/payload.json and, for the browser benchmark, bertviz's
HTML at 20 and 128 tokens (bench/out/bertviz_<view>_<T>.html). BENCH_BERTVIZ_512=0 skips bertviz at 512
tokens (~2 × 20 s and several GB of memory).
"""

from __future__ import annotations

import gc
import os
import sys
import time

import torch

from common import LENGTHS, OUT, conditions, mb, ms, save, table, text_of, timeit, tokenizer
from pagefigs import page_figures, payload

import attnviz
from attnviz.backends.builtin import minilm_path

BROWSER_LENGTHS = (20, 128)  # bertviz's model view at 512 tokens is 870 MB: no browser renders it
HTML_PAGE = "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>bertviz {view}</title></head><body>\n{body}\n</body></html>\n"


def attnviz_figures(tok) -> dict:
    """Per length: each figure's JSON bytes and the seconds to build and serialise them all."""
    backend = attnviz.load("builtin:minilm")
    out = {}
    for n in LENGTHS:
        trace = backend.trace(text_of(tok, n))
        sizes = {name: payload(fig) for name, fig in page_figures(trace).items()}
        t = timeit(lambda: [payload(f) for f in page_figures(trace).values()], 3 if n < 512 else 2)
        out[n] = {"bytes": sizes, "total": sum(sizes.values()), "build_s": t["median_s"]}
    return out


def bertviz_views(tok) -> dict:
    """Per length and view: HTML bytes and the seconds ``head_view`` / ``model_view`` take to build it."""
    from bertviz import head_view, model_view
    from transformers import AutoModel

    model = AutoModel.from_pretrained(minilm_path(), attn_implementation="eager").eval()
    views = {"head_view": head_view, "model_view": model_view}
    skip_512 = os.environ.get("BENCH_BERTVIZ_512", "1") == "0"
    out = {}
    for n in LENGTHS:
        if n == 512 and skip_512:
            continue
        ids = torch.tensor([tok(text_of(tok, n))["input_ids"]])  # (1, T)
        with torch.inference_mode():
            attn = model(input_ids=ids, output_attentions=True).attentions  # L × (1, H, T, T)
        if len(attn) != model.config.num_hidden_layers:
            raise RuntimeError("the model returned no attentions: is attn_implementation eager?")
        tokens = tok.convert_ids_to_tokens(ids[0])
        out[n] = {}
        for name, view in views.items():
            t0 = time.perf_counter()
            html = view(attn, tokens, html_action="return").data
            seconds = time.perf_counter() - t0
            out[n][name] = {"bytes": len(html.encode()), "build_s": seconds}
            if n in BROWSER_LENGTHS:
                (OUT / f"bertviz_{name}_{n}.html").write_text(HTML_PAGE.format(view=name, body=html))
            print(f"  bertviz {name} {n}: {len(html) / 1e6:,.1f} MB in {seconds:.1f} s", file=sys.stderr)
            del html
            gc.collect()
    return out


def run() -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    result = {"conditions": conditions(), "attnviz": attnviz_figures(tok), "bertviz": bertviz_views(tok)}
    save("payload", result)
    return result


def report(result: dict) -> str:
    ours, theirs = result["attnviz"], result["bertviz"]
    names = list(dict.fromkeys(k for r in ours.values() for k in r["bytes"]))  # past CELLS tokens, the long view's
    rows = [[n, *(mb(r["bytes"].get(k)) for k in names), mb(r["total"]), ms(r["build_s"])] for n, r in ours.items()]
    out = table("attnviz attention page: MB of figure JSON per figure", ["tokens", *names, "total",
                                                                         "build + JSON ms"], rows)
    rows = []
    for n, r in ours.items():
        b = theirs.get(n) or theirs.get(str(n))
        hv, mv = (b["head_view"], b["model_view"]) if b else ({}, {})
        rows.append([n, mb(r["total"]), mb(hv.get("bytes")), mb(mv.get("bytes")),
                     ms(r["build_s"]), ms(hv.get("build_s")), ms(mv.get("build_s")),
                     f"{mv['bytes'] / r['total']:,.0f}×" if mv else "—"])
    return out + table("Same model, same text: attnviz page vs bertviz 1.4.1 (MB; build ms)", [
        "tokens", "attnviz total", "bertviz head view", "bertviz model view", "attnviz build",
        "head view build", "model view build", "model view / attnviz"], rows)


if __name__ == "__main__":
    print(report(run()))
