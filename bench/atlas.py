"""The long-context head atlas (issue 53): wall time and peak memory of ``attnviz.head_atlas`` per model and probe
length, each run in a fresh subprocess (its ``ru_maxrss`` is the atlas's own high-water mark, the model's load
included), with the peak a trace of that length alone holds (``footprint.trace_mb``) beside it.

    python bench/atlas.py                               # builtin:seed 2,048 / 4,096 / 16,384; SmolLM2 2,048 / 4,096
    python bench/atlas.py --child MODEL TOKENS NEEDLES  # one run (what the parent starts)

BENCH_ATLAS_NEEDLES (default 3) sets the probes per run (a causal model runs as many null probes); a run that
takes longer than BENCH_ATLAS_TIMEOUT seconds (default 1,500) is reported as such. The knock-out check is not
timed here (it is three more forwards a probe).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from common import ROOT, conditions, save, table

SEED = "builtin:seed"
RUNS = [(SEED, 2048), (SEED, 4096), (SEED, 16384), ("smollm2", 2048), ("smollm2", 4096), ("smollm2", 16384)]


def model_key(name: str) -> str:
    if name != "smollm2":
        return name
    from attnviz.backends.gguf import smollm2_path

    return f"hf:{smollm2_path()}"


def child(name: str, tokens: int, needles: int) -> None:
    import attnviz
    from attnviz.backends import footprint

    started = time.perf_counter()
    backend = attnviz.load(model_key(name))
    loaded = time.perf_counter()
    try:
        frame = attnviz.head_atlas(backend, tokens=tokens, needles=needles)
    except ValueError as e:
        print(json.dumps({"refused": str(e)}))
        return
    done = time.perf_counter()
    print(json.dumps({
        "load_s": loaded - started, "atlas_s": done - loaded, "tokens": frame.attrs["tokens"],
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trace_mb": footprint.trace_mb(backend, frame.attrs["tokens"]),
        "retrieval_heads": int((frame.role == "retrieval").sum()), "heads": len(frame),
    }))


def main() -> None:
    needles = int(os.environ.get("BENCH_ATLAS_NEEDLES", 3))
    limit = float(os.environ.get("BENCH_ATLAS_TIMEOUT", 1500))
    runs = [(m, int(t)) for m, t in (a.rsplit(":", 1) for a in sys.argv[1:])] or RUNS
    rows, results = [], []
    for name, tokens in runs:
        cmd = [sys.executable, __file__, "--child", name, str(tokens), str(needles)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=ROOT)
            got = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {"error": out.stderr[-300:]}
        except subprocess.TimeoutExpired:
            got = {"timeout_s": limit}
        results.append({"model": name, "tokens": tokens, "needles": needles, **got})
        if "atlas_s" in got:
            rows.append([name, f"{got['tokens']:,}", needles, f"{got['atlas_s']:,.1f}", f"{got['load_s']:,.1f}",
                         f"{got['peak_mb']:,.0f}", f"{got['trace_mb']:,.0f}",
                         f"{got['retrieval_heads']} of {got['heads']}"])
        else:
            why = got.get("refused") or (f"over {limit:,.0f} s" if "timeout_s" in got else got.get("error", "?"))
            rows.append([name, f"{tokens:,}", needles, "—", "—", "—", "—", why[:90]])
        print(rows[-1], file=sys.stderr, flush=True)
    print(table(f"Head atlas, {needles} probes a run (and as many nulls for a causal model), a fresh process each",
                ["model", "tokens", "probes", "atlas s", "load s", "peak RSS MB", "one trace MB", "retrieval heads"],
                rows))
    save("atlas", {"conditions": conditions(), "runs": results})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
