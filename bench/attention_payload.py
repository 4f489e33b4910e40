"""What the attention page sends: each figure's JSON bytes on builtin:minilm at 20, 128 and 512 tokens (cell by
cell up to 256 tokens; past it the long view's pooled figures, window and reach, ui/long.explore).

Run: ``python bench/attention_payload.py`` (BENCH_QUICK=1 for fewer repeats). Budget: ≤ 2 MB in all at
512 tokens, where bertviz's model view writes 870 MB of HTML.
"""

from __future__ import annotations

import time

import common
from common import LENGTHS, MB, mb, ms, table

import attnviz
from attnviz.figures.attention import explorer_figures
from attnviz.analysis import long
from attnviz.figures import long as figs
from attnviz.figures.overview import stack_tiles
from attnviz.figures.view import Options, layer_view
from attnviz.figures.explorer import CELLS, DETAIL, overview_size

BUDGET = 2 * MB


def long_figures(trace, layer: int, head: int | None, focus: int) -> dict:
    """name -> go.Figure (the reach's shaded text as its HTML string): what the Attention page draws past CELLS
    tokens, with the default window (its first 64 tokens) and pooling (max)."""
    L, H, T = trace.n_layers, trace.n_heads, trace.n_tokens
    s = long.survey(trace.weights, overview_size(L, H), DETAIL)
    pooled = s.pooled("detail", "max")[layer]  # (H, s, s)
    blocks = s.layer_max[layer] if head is None else pooled[head]
    row, col = trace.row(layer, head, focus), trace.column(layer, head, focus)  # (T,), (T,)
    w = long.window(trace.weights, layer, head, 0, min(64, T))  # (n, n)
    received = s.received[layer].mean(0) if head is None else s.received[layer, head]
    out = {
        "overview": figs.head_mosaic(s.pooled("overview", "max"), "max", T, s.block("overview"), (layer, head)),
        "blocks": figs.blocks_heatmap(blocks, s.starts["detail"], s.block("detail"), T, "", "max", (0, min(64, T))),
        "window": figs.window_heatmap(w, 0, trace.tokens, ""),
        "reach": figs.reach_lines(row, col, focus, "x", ""),
        "sinks": figs.sink_grid(long.first_token_share(s), long.SINK_SHARE),
        "received": figs.received_line(received, T, ""),
        "distance": figs.distance_profile(s.distance[layer], long.distance_labels(s.edges), "", head),
    }
    return out | {"reach_html": figs.reach_html(trace.tokens, trace.word_ids, row, focus)}


def page_figures(trace, options: Options = Options(), layer: int = 0, head: int | None = 0, focus: int = 1) -> dict:
    """name -> go.Figure: exactly what pages/1_Attention.py draws for the first stack of ``trace``."""
    if trace.n_tokens > CELLS:
        return long_figures(trace, layer, head, focus)
    stack, shown = trace.stack(None), options._replace(log_scale=False)
    view = layer_view(stack, layer, shown)
    return explorer_figures(view, stack_tiles(stack, shown), layer, head, min(focus, len(view.q_labels) - 1), "to",
                            options.log_scale)


def measure(trace, options: Options, head: int | None) -> dict:
    """Bytes per figure, build and serialisation seconds (median of a few runs)."""
    build = common.timeit(lambda: page_figures(trace, options, head=head), common.repeats(trace.n_tokens))
    figs = page_figures(trace, options, head=head)
    t0 = time.perf_counter()
    sizes = {name: len(fig if isinstance(fig, str) else fig.to_json()) for name, fig in figs.items()}
    return {"bytes": sizes, "total": sum(sizes.values()), "build_s": build["median_s"],
            "json_s": time.perf_counter() - t0}


def main() -> None:
    tok = common.tokenizer()
    model = attnviz.load("builtin:minilm")
    cases = {
        "default": (Options(), 0),
        "all options, layer mean": (Options(hide_special=True, merge=True, threshold=0.01, log_scale=True), None),
    }
    results, rows = {}, []
    for n in LENGTHS:
        trace = model.trace(common.text_of(tok, n))
        for case, (options, head) in cases.items():
            r = measure(trace, options, head)
            results[f"{n}/{case}"] = r
            b = r["bytes"]
            rows.append([n, case, ", ".join(f"{k} {mb(v)}" for k, v in b.items()),
                         mb(r["total"]), ms(r["build_s"]), ms(r["json_s"]),
                         "yes" if n != 512 or r["total"] <= BUDGET else "NO"])
    print(table(
        f"Attention page payload, builtin:minilm (MB of figure JSON; ms to build and to serialise; past {CELLS} "
        "tokens the long view, whose options are its own)",
        ["tokens", "options", "figures", "total", "build ms", "json ms", "≤ 2 MB"], rows,
    ))
    print(f"\n{common.conditions()}")
    print(f"saved {common.save('attention_payload', {'conditions': common.conditions(), 'results': results})}")
    if any(results[f"512/{case}"]["total"] > BUDGET for case in cases):
        raise SystemExit("over the 2 MB budget at 512 tokens")


if __name__ == "__main__":
    main()
