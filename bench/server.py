"""Server side: bare forward, full trace and the attention page's figures, per model and length.

Run: ``python bench/server.py`` (BENCH_QUICK=1 for fewer repeats). Prints tables, writes bench/out/server.json.
"""

from __future__ import annotations

import sys

import torch

from common import LENGTHS, builtin_bare, compare, conditions, ms, quick, ratio, repeats, save, table, text_of, timeit, tokenizer
from pagefigs import page_figures, payload

import attnviz
from attnviz.backends.builtin import minilm_path


def hf_key() -> str:
    """MiniLM's folder through the Hugging Face backend."""
    return f"hf:{minilm_path()}"


def short(key: str) -> str:
    return key.replace(str(minilm_path()), "<minilm>")


def bare_forward(key: str, backend):
    """``ids -> None``: the model's forward alone at SDPA speed, without the trace's extra outputs."""
    if key.startswith("builtin:"):
        return builtin_bare(backend.net)
    from transformers import AutoModel

    net = AutoModel.from_pretrained(minilm_path(), attn_implementation="sdpa").eval()
    return lambda ids: net(input_ids=ids, output_attentions=False, output_hidden_states=False)


def weights_forward(key: str, backend):
    """``ids -> outputs``: the least any other tool runs to get the attention weights: transformers' eager
    forward with ``output_attentions`` and ``output_hidden_states`` (None for the built-in models)."""
    if key.startswith("builtin:"):
        return None
    from transformers import AutoModel

    net = AutoModel.from_pretrained(minilm_path(), attn_implementation="eager").eval()
    return lambda ids: net(input_ids=ids, output_attentions=True, output_hidden_states=True)


def _inference(fn, ids):
    with torch.inference_mode():
        return fn(ids)


def bench_model(key: str, tok) -> list[dict]:
    try:
        backend = attnviz.load(key)
    except Exception as e:  # e.g. the HF backend is not there yet: report it, measure the rest
        print(f"  {key}: cannot load ({type(e).__name__}: {e})", file=sys.stderr)
        return [{"model": key, "error": f"{type(e).__name__}: {e}"}]
    bare, weights = bare_forward(key, backend), weights_forward(key, backend)
    rows = []
    for n in LENGTHS:
        text = text_of(tok, n)
        ids = torch.tensor([tok(text)["input_ids"]])  # (1, T)
        r = repeats(n)
        runs = {"bare": lambda: _inference(bare, ids), "trace": lambda: backend.trace(text)}
        if weights is not None:
            runs["weights"] = lambda: _inference(weights, ids)
        t = compare(runs, r, warmup=2)
        t_bare, t_trace = t["bare"], t["trace"]
        trace = backend.trace(text)
        t_figs = timeit(lambda: [payload(f) for f in page_figures(trace).values()], max(2, r // 2))
        rows.append({
            "model": key, "tokens": trace.n_tokens, "bare_forward": t_bare, "trace": t_trace,
            "figures": t_figs, "ratio": ratio(t_trace, t_bare),
            "ratio_to_weights": ratio(t_trace, t["weights"]) if weights is not None else None,
            "trace_nbytes": trace.nbytes,
        })
        print(f"  {key} {n}: bare {ms(t_bare['median_s'])} ms, trace {ms(t_trace['median_s'])} ms", file=sys.stderr)
    return rows


def builtin_vs_hf(tok) -> list[dict]:
    """attnviz's encoder against transformers' eager BertModel, same MiniLM weights, same ids."""
    from transformers import AutoModel

    ours = attnviz.load("builtin:minilm").net
    theirs = AutoModel.from_pretrained(minilm_path(), attn_implementation="eager").eval()
    rows = []
    for n in LENGTHS:
        ids = torch.tensor([tok(text_of(tok, n))["input_ids"]])  # (1, T)
        r = 4 * repeats(n)  # a ratio that is tested against 1.00: enough runs for the median to settle
        with torch.inference_mode():
            runs = {
                "builtin": lambda: ours(ids),  # eager: returns its attentions and hidden states
                "hf_bare": lambda: theirs(input_ids=ids),
                "hf_with_outputs": lambda: theirs(input_ids=ids, output_attentions=True, output_hidden_states=True),
            }
            t = compare(runs, r, warmup=2)
        rows.append({"tokens": n, **t, "ratio": ratio(t["builtin"], t["hf_bare"])})
    return rows


def run() -> dict:
    tok = tokenizer()
    models = ["builtin:minilm", hf_key(), "builtin:seed"]
    result = {"conditions": conditions(), "quick": quick(), "rows": [], "builtin_vs_hf": builtin_vs_hf(tok)}
    for key in models:
        result["rows"] += bench_model(key, tok)
    save("server", result)
    return result


def report(result: dict) -> str:
    rows = [
        [short(r["model"]), r["tokens"], ms(r["bare_forward"]["median_s"]),
         ms(r["trace"]["median_s"]), f"{r['ratio']:.2f}",
         f"{r['ratio_to_weights'] or r['ratio']:.2f}", ms(r["figures"]["median_s"])]
        if "error" not in r else [short(r["model"]), "—", "—", "—", "—", "—", r["error"][:60]]
        for r in result["rows"]
    ]
    out = table("Server: median ms per call; ratios are medians of per-round ratios", [
        "model", "tokens", "bare forward", "trace", "trace / bare", "trace / forward returning weights",
        "figures (build + JSON)"], rows)
    vs = [[r["tokens"], ms(r["builtin"]["median_s"]), ms(r["hf_bare"]["median_s"]),
           ms(r["hf_with_outputs"]["median_s"]), f"{r['ratio']:.2f}"] for r in result["builtin_vs_hf"]]
    out += table("Built-in encoder vs Hugging Face eager, MiniLM weights: median ms", [
        "tokens", "built-in net(ids)", "HF model(ids)", "HF + attentions + hidden", "built-in / HF bare"], vs)
    return out


if __name__ == "__main__":
    print(report(run()))
