"""What the attention page sends: each figure's JSON bytes on builtin:minilm at 20, 128 and 512 tokens.

Run: ``python bench/attention_payload.py`` (BENCH_QUICK=1 for fewer repeats). Budget: ≤ 2 MB in all at
512 tokens, where bertviz's model view writes 870 MB of HTML.
"""

from __future__ import annotations

import time

import common
from common import LENGTHS, MB, mb, ms, table

import attnviz
from attnviz.figures.attention import explorer_figures
from attnviz.figures.view import Options, stack_view, dense_stacks

BUDGET = 2 * MB


def page_figures(trace, options: Options = Options(), layer: int = 0, head: int | None = 0, focus: int = 1) -> dict:
    """name -> go.Figure: exactly what pages/1_Attention.py draws for the first stack of ``trace``."""
    name, (attn, q, k, causal) = next(iter(dense_stacks(trace).items()))
    view = stack_view(name, attn, q, k, causal, options._replace(log_scale=False))
    return explorer_figures(view, layer, head, min(focus, len(view.q_labels) - 1), "to", options.log_scale)


def measure(trace, options: Options, head: int | None) -> dict:
    """Bytes per figure, build and serialisation seconds (median of a few runs)."""
    build = common.timeit(lambda: page_figures(trace, options, head=head), common.repeats(trace.n_tokens))
    figs = page_figures(trace, options, head=head)
    t0 = time.perf_counter()
    sizes = {name: len(fig.to_json()) for name, fig in figs.items()}
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
            rows.append([n, case, *(mb(b[k]) for k in ("overview", "detail", "focus", "focus_heads")),
                         mb(r["total"]), ms(r["build_s"]), ms(r["json_s"]),
                         "yes" if n != 512 or r["total"] <= BUDGET else "NO"])
    print(table(
        "Attention page payload, builtin:minilm (MB of figure JSON; ms to build and to serialise)",
        ["tokens", "options", "overview", "detail", "focus", "focus heads", "total", "build ms", "json ms",
         "≤ 2 MB"], rows,
    ))
    print(f"\n{common.conditions()}")
    print(f"saved {common.save('attention_payload', {'conditions': common.conditions(), 'results': results})}")
    if any(results[f"512/{case}"]["total"] > BUDGET for case in cases):
        raise SystemExit("over the 2 MB budget at 512 tokens")


if __name__ == "__main__":
    main()
