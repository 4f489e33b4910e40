"""Every benchmark in one go, then PASS / MISS per target.

Run from the repository root: ``pip install -r bench/requirements.txt && python bench/run_all.py``.
Each script runs in its own process and prints its tables; JSON goes to bench/out/ and the verdicts
to bench/out/summary.json. BENCH_QUICK=1 repeats less; BENCH_THREADS=N sets torch's threads;
BENCH_SKIP=analysis_speed,… leaves scripts out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from common import MB, OUT, ROOT, conditions, mb, save, table
from server import short

# In order: payload writes bertviz's HTML that browser opens.
SCRIPTS = ["server", "payload", "browser", "memory", "attention_payload", "page_payload", "analysis_speed",
           "on_demand", "corpus", "long_browser", "cold_memory", "dtype_memory", "interventions", "notebook_payload",
           "faithfulness", "visitors", "lens_payload", "gguf_llm", "decoder_load"]
MINILM = "builtin:minilm"


def run_scripts() -> dict:
    """script -> (exit code, seconds); each script prints its own tables."""
    status = {}
    skip = set(os.environ.get("BENCH_SKIP", "").replace(" ", "").split(","))
    for name in (s for s in SCRIPTS if s not in skip):
        print(f"\n## {name}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, str(ROOT / "bench" / f"{name}.py")], cwd=ROOT)
        status[name] = (code, time.perf_counter() - t0)
        print(f"({name}: exit {code}, {status[name][1]:.0f} s)", flush=True)
    return status


def load(name: str) -> dict | None:
    path = OUT / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def targets() -> list[list]:
    """[target, measured, limit, verdict] for every target the issue sets."""
    server, payload, browser, memory = (load(n) for n in ("server", "payload", "browser", "memory"))
    rows = []

    def add(name, value, limit, ok, fmt):
        rows.append([name, "not measured" if value is None else fmt(value), fmt(limit),
                     "—" if value is None else ("PASS" if ok(value) else "MISS")])

    overview = payload and payload["attnviz"]["512"]["bytes"].get("overview")
    add("overview payload at 512 tokens", overview, 2 * MB, lambda v: v <= 2 * MB, lambda v: f"{mb(v)} MB")

    for r in (server or {}).get("rows", []):
        if r.get("tokens") == 512:
            add(f"trace / bare forward at 512, {short(r['model'])}", r["ratio"], 1.3, lambda v: v <= 1.3,
                lambda v: f"{v:.2f}×")
            if r.get("ratio_to_weights") is not None:  # what attnviz adds to transformers' own cost of the weights
                add(f"  (trace / forward returning weights, {short(r['model'])})", r["ratio_to_weights"], 1.3,
                    lambda v: v <= 1.3, lambda v: f"{v:.2f}×")
    for r in (server or {}).get("builtin_vs_hf", []):
        add(f"built-in / HF eager forward, MiniLM, {r['tokens']} tokens", r["ratio"], 1.0, lambda v: v <= 1.0,
            lambda v: f"{v:.2f}×")

    ours = browser and browser["attnviz"].get("512")
    add("overview drawn in the browser at 512 tokens", ours and ours["overview_s"], 1.5, lambda v: v <= 1.5,
        lambda v: f"{v:.2f} s")

    minilm = next((r for r in (memory or {}).get("rows", []) if r.get("model") == MINILM and "error" not in r), None)
    add("trace bytes at 512 tokens, builtin:minilm", minilm and minilm["trace_nbytes"], 150 * MB,
        lambda v: v <= 150 * MB, lambda v: f"{mb(v)} MB")

    ratio = lambda v: f"{v:.2f}×"  # noqa: E731
    for r in (load("on_demand") or {}).get("speed", []):
        if "ratio" not in r:
            continue
        limit = 1.15 if r["tokens"] <= 512 else 1.2
        add(f"trace / bare SDPA forward at {r['tokens']:,}, {short(r['model'])}", r["ratio"], limit,
            lambda v, lim=limit: v <= lim, ratio)
        if "pooled_ratio" in r:
            add(f"pooled(256) of every head / forward at {r['tokens']:,}, {short(r['model'])}", r["pooled_ratio"],
                2.0, lambda v: v <= 2.0, ratio)
    mem = (load("on_demand") or {}).get("memory", {})
    eager, ours = mem.get("llama 4096 eager", {}), mem.get("llama 4096 trace", {})
    if "peak" in eager and "peak" in ours:
        share = (ours["peak"] - ours["loaded"]) / max(1, eager["peak"] - eager["loaded"])
        add("memory a 4,096-token trace adds / what eager attention adds", share, 0.05, lambda v: v <= 0.05,
            lambda v: f"{v:.1%}")
    for name in ("llama 16384 trace", "seed 16384 trace"):
        r = mem.get(name, {})
        if "head_s" in r:
            add(f"one head at {r['tokens']:,} tokens ({name.split()[0]})", r["head_s"], 2.0, lambda v: v <= 2.0,
                lambda v: f"{v:.2f} s")
            add(f"peak RSS tracing {r['tokens']:,} tokens ({name.split()[0]})", r["peak"], 24 * 2**30,
                lambda v: v <= 24 * 2**30, lambda v: f"{v / 2**30:.1f} GB")
    long_rows(add)
    corpus = load("corpus")
    add("corpus texts/s at 128 tokens, batched / one at a time", corpus and corpus["batched_vs_one"], 3.0,
        lambda v: v >= 3.0, lambda v: f"{v:.2f}×")
    ray = corpus and corpus.get("ray")
    add("corpus on local Ray (2 actors) / in-process, overhead", ray and ray["overhead"], 0.2, lambda v: v <= 0.2,
        lambda v: f"{v:+.0%}")
    grown = corpus and corpus["memory"]
    span = f"{grown['n_small']:,} → {grown['n_big']:,}" if grown else "1,000 → 10,000"
    add(f"corpus RSS growth, {span} texts", grown and grown["growth_mb"] * MB, 100 * MB,
        lambda v: v <= 100 * MB, lambda v: f"{mb(v)} MB")
    lens = {r["what"].split(":")[0]: r["bytes"] for r in (load("lens_payload") or {}).get("rows", [])}
    peer = lens.get("CircuitsVis attention_patterns, one layer (CDN HTML)")  # issue 54: beside CircuitsVis
    ours = lens.get("attnviz explorer, cache with hook_q/hook_k")
    add("explorer on a 1,024-token TransformerLens cache (every layer) / CircuitsVis, one layer",
        ours and peer and ours / peer, 1.0, lambda v: v < 1.0, lambda v: f"{v:.4f}×")
    for r in (load("visitors") or {}).get("rows", []):  # issue 58: every visitor served, none lost
        total = r["long"] + r["short"]
        add(f"{r['long']} long + {r['short']} short visitors at once: pages finished", r["long_done"] + r["short_done"],
            total, lambda v, n=total: v == n, lambda v, n=total: f"{v} of {n}")
    loads = load("decoder_load")  # issue 57: only the real decoder's first load dequantises
    add("smollm2: a cached load / the first load (dequantising)", loads and 1 / loads["first_over_cached"], 0.5,
        lambda v: v <= 0.5, lambda v: f"{v:.2f}×")
    return rows


def long_rows(add) -> None:
    """Issues 14 and 34: the Attention page in the browser beside bertviz at 20–512 tokens (cell by cell up to 256,
    pooled past it), and at 4,096 and 16,384."""
    lb = load("long_browser") or {}
    seconds = lambda v: f"{v:.2f} s"  # noqa: E731
    for n, r in (lb.get("small") or {}).items():
        head = r.get("head_view", {}).get("drawn_s")
        for page, label in (("attention", "Attention"),):
            ours = r.get(page, {}).get("overview_s")
            if head is None:  # bertviz cannot open its HTML at this length: nothing to be slower than
                rows_cannot(add, f"{label} overview drawn at {n} tokens / bertviz head view", ours)
            else:
                add(f"{label} overview drawn at {n} tokens / bertviz head view ({head:.2f} s)", ours, head,
                    lambda v, lim=head: v <= lim, seconds)
    for n, r in (lb.get("long") or {}).items():
        n = int(n)
        if n == 4096:
            limit = 1.5 * r["forward_s"] + 1
            warmed = lb.get("warm_mb")  # a diagnosis run (BENCH_WARM_MB) is never the verdict
            add(f"Attention overview + detail drawn at 4,096 / 1.5× bare forward ({r['forward_s']:.1f} s) + 1 s"
                + (f" (memory warmed, {warmed} MB: rerun without BENCH_WARM_MB)" if warmed else ""),
                None if warmed else r["detail_s"], limit, lambda v, lim=limit: v <= lim, seconds)
        if n == 16384:
            add("Attention page at 16,384 tokens: overview + detail drawn (completes)", r["detail_s"], None,
                lambda v: True, lambda v: "—" if v is None else seconds(v))
            add("Attention page bytes at 16,384 tokens (websocket)", r["page_bytes"], 2 * MB, lambda v: v <= 2 * MB,
                lambda v: f"{mb(v)} MB")
            add("zoom to a 256-token window at 16,384, action → drawn", r["zoom_s"], 1.0, lambda v: v <= 1.0, seconds)
        add(f"server peak RSS at {n:,} tokens / HF eager with attentions ({r['eager_bytes'] / 2**30:.1f} GB)",
            r["peak_rss"], r["eager_bytes"], lambda v, lim=r["eager_bytes"]: v <= lim, lambda v: f"{v / 2**30:.2f} GB")


def rows_cannot(add, name, value) -> None:
    """A row whose peer cannot run: the limit column says so; the verdict is a pass when attnviz drew it."""
    add(name, value, None, lambda v: True, lambda v: "bertviz cannot (869 MB of HTML)" if v is None else f"{v:.2f} s")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    before = conditions()
    status = run_scripts()
    rows = targets()
    print(table("Targets", ["target", "measured", "limit", "verdict"], rows))
    print(table("Scripts", ["script", "exit", "seconds"], [[k, c, f"{s:.0f}"] for k, (c, s) in status.items()]))
    save("summary", {"conditions_at_start": before, "conditions_at_end": conditions(),
                     "scripts": status, "targets": rows})
    failed = [k for k, (code, _) in status.items() if code]
    if failed:
        print(f"\nscripts that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
