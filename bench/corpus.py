"""Corpus mode: texts/s batched vs one at a time, Ray's overhead, memory over many texts.

Run: ``python bench/corpus.py`` (``BENCH_QUICK=1``: fewer texts; ``BENCH_SKIP_RAY=1``: leave Ray out). On MiniLM:

- throughput at 128-token texts: padded batches of 16 against the same path one text at a time, and against
  what the library did before corpus mode (``head_stats(backend.trace(text))`` per text);
- Ray, a local cluster of 2 one-CPU actors, against in-process with 2 torch threads: the same cores;
- RSS of a child process after 1,000 and after 10,000 short texts (100 and 1,000 with BENCH_QUICK).

Writes bench/out/corpus.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, conditions, quick, save, table, text_of, threads, tokenizer

MODEL = "builtin:minilm"


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def throughput(backend, texts: list[str]) -> dict:
    """texts/s of each way, run in turn (the machine's load hits all alike)."""
    from attnviz import corpus as cp

    cp.text_stats(backend, texts[:2])  # warm up
    ways = {
        "batched (16)": lambda: cp.text_stats(backend, texts, 16),
        "one at a time": lambda: cp.text_stats(backend, texts, 1),
        "trace + head_stats per text": lambda: [cp.trace_stats(backend.trace(t)) for t in texts],
    }
    out = {}
    for name, fn in ways.items():
        t0 = time.perf_counter()
        fn()
        out[name] = len(texts) / (time.perf_counter() - t0)
    return out


def ray_overhead(texts: list[str], workdir: Path) -> dict:
    """Wall seconds of the same job in-process (2 torch threads) and on a local 2-CPU Ray (cluster start
    excluded; actors' model loading included, as a job pays it)."""
    import ray
    import torch

    from attnviz import corpus as cp

    path = workdir / "ray.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    cp.run(MODEL, path, workdir / "local.parquet", shard_texts=len(texts))
    local = time.perf_counter() - t0
    ray.init(num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}})
    try:
        t0 = time.perf_counter()
        cp.run(MODEL, path, workdir / "ray.parquet", ray_address="auto", shard_texts=len(texts))
        remote = time.perf_counter() - t0
        t0 = time.perf_counter()  # actors again: the model load is paid once more, the cluster is warm
        cp.run(MODEL, path, workdir / "ray2.parquet", ray_address="auto", shard_texts=len(texts))
        warm = time.perf_counter() - t0
    finally:
        ray.shutdown()
    return {"texts": len(texts), "in_process_s": local, "ray_s": remote, "ray_warm_s": warm,
            "in_process_texts_per_s": len(texts) / local, "ray_texts_per_s": len(texts) / warm,
            "per_worker_texts_per_s": len(texts) / warm / 2, "overhead": warm / local - 1}


def child(n_small: int, n_big: int, path: str) -> None:
    """Run the corpus at ``path`` in-process and print RSS after n_small and after n_big texts (JSON)."""
    from attnviz import corpus as cp

    threads()
    seen = {}

    def progress(done):
        if done >= n_small and "small" not in seen:
            seen["small"] = rss()
        seen["big"] = rss()

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        cp.run(MODEL, path, Path(d) / "s.parquet", limit=n_big, shard_texts=n_small // 4, progress=progress)
    print(json.dumps({"rss_small": seen["small"], "rss_big": seen["big"], "seconds": time.perf_counter() - t0}))


def memory(workdir: Path) -> dict:
    from attnviz.data import sentences

    n_small, n_big = (100, 1000) if quick() else (1000, 10000)
    path = workdir / "many.txt"
    path.write_text("\n".join(sentences(n_big, seed=1)) + "\n", encoding="utf-8")
    out = subprocess.run([sys.executable, __file__, "--child", str(n_small), str(n_big), str(path)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"n_small": n_small, "n_big": n_big, **got, "growth_mb": (got["rss_big"] - got["rss_small"]) / 1e6}


def main() -> None:
    import attnviz

    n_threads = threads()
    tok = tokenizer()
    n = 16 if quick() else 64
    texts = [text_of(tok, 128, v) for v in range(n)]
    backend = attnviz.load(MODEL)
    speed = throughput(backend, texts)
    rows = [[k, f"{v:.2f}", f"{v / speed['one at a time']:.2f}×"] for k, v in speed.items()]
    print(table(f"{MODEL}, {n} texts of 128 tokens, {n_threads} torch threads", ["way", "texts/s", "vs one at a time"],
                rows))
    result = {"conditions": conditions(), "throughput": speed,
              "batched_vs_one": speed["batched (16)"] / speed["one at a time"],
              "batched_vs_trace": speed["batched (16)"] / speed["trace + head_stats per text"]}
    with tempfile.TemporaryDirectory() as d:
        if not os.environ.get("BENCH_SKIP_RAY"):
            try:
                result["ray"] = r = ray_overhead(texts * 2, Path(d))
                print(table("Ray local, 2 one-CPU actors, vs in-process with 2 threads", ["measure", "value"], [
                    ["texts", r["texts"]], ["in-process s", f"{r['in_process_s']:.1f}"],
                    ["Ray s (first job: actors start)", f"{r['ray_s']:.1f}"], ["Ray s (warm cluster)", f"{r['ray_warm_s']:.1f}"],
                    ["per-worker texts/s", f"{r['per_worker_texts_per_s']:.2f}"], ["overhead", f"{r['overhead']:+.0%}"]]))
            except ImportError:
                print("Ray is not installed: pip install -r requirements-ray.txt")
        result["memory"] = m = memory(Path(d))
    print(table("RSS of one corpus run", ["measure", "value"], [
        [f"RSS after {m['n_small']:,} texts", f"{m['rss_small'] / 1e6:,.0f} MB"],
        [f"RSS after {m['n_big']:,} texts", f"{m['rss_big'] / 1e6:,.0f} MB"],
        ["growth", f"{m['growth_mb']:+,.1f} MB"], ["seconds", f"{m['seconds']:,.0f}"]]))
    save("corpus", result)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        main()
