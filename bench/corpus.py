"""Corpus mode: texts/s batched vs one at a time, Ray's overhead, memory over many texts.

Run: ``python bench/corpus.py`` (``BENCH_QUICK=1``: fewer texts; ``BENCH_SKIP_RAY=1``: leave Ray out). On MiniLM:

- throughput at 128-token texts: padded batches of 16 against the same path one text at a time, and against
  what the library did before corpus mode (``head_stats(backend.trace(text))`` per text);
- Ray, a local cluster of 2 one-CPU actors, against in-process with 2 torch threads (the same cores), on jobs of
  16 and 400 texts (100 with BENCH_QUICK; BENCH_RAY_TEXTS sets it): start-up and steady state apart;
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

from common import ROOT, clock, conditions, quick, save, table, text_of, threads, tokenizer

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
    out, now = {}, clock()
    for name, fn in ways.items():
        t0 = now()
        fn()
        out[name] = len(texts) / (now() - t0)
    return out


def ray_overhead(texts: list[str], n_small: int, workdir: Path) -> dict:
    """Wall seconds of the same jobs in-process (2 torch threads) and on a local 2-CPU Ray (cluster start
    excluded), at ``n_small`` texts and at len(texts): the difference is the steady state (texts/s once actors
    run), the rest of the small job is the start-up a job pays (actors start and load the model, Ray Data's
    executor starts)."""
    import ray
    import torch

    from attnviz import corpus as cp

    paths = {}
    for name, part in (("small", texts[:n_small]), ("big", texts)):
        paths[name] = workdir / f"ray-{name}.txt"
        paths[name].write_text("\n".join(part) + "\n", encoding="utf-8")
    torch.set_num_threads(2)
    out = {"texts_small": n_small, "texts_big": len(texts)}

    def job(where, name, address=None):
        t0 = time.perf_counter()
        cp.run(MODEL, paths[name], workdir / f"{where}-{name}-{time.monotonic_ns()}.parquet", ray_address=address,
               shard_texts=len(texts))
        out[f"{where}_{name}_s"] = time.perf_counter() - t0

    job("in_process", "small")
    job("in_process", "big")
    ray.init(num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}})
    try:
        job("ray_first", "small", "auto")  # the first job on a fresh cluster: worker processes start too
        job("ray", "small", "auto")  # a warm cluster: the actors start and load the model again
        job("ray", "big", "auto")
    finally:
        ray.shutdown()
    extra = len(texts) - n_small
    for where in ("in_process", "ray"):
        rate = extra / (out[f"{where}_big_s"] - out[f"{where}_small_s"])
        out[f"{where}_steady_texts_per_s"] = rate
        out[f"{where}_startup_s"] = max(0.0, out[f"{where}_small_s"] - n_small / rate)
    out["per_worker_texts_per_s"] = out["ray_steady_texts_per_s"] / 2
    out["overhead"] = out["ray_big_s"] / out["in_process_big_s"] - 1
    out["steady_overhead"] = out["in_process_steady_texts_per_s"] / out["ray_steady_texts_per_s"] - 1
    return out


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
                n_big = int(os.environ.get("BENCH_RAY_TEXTS", "") or (100 if quick() else 400))
                result["ray"] = r = ray_overhead([texts[i % n] for i in range(n_big)], 16, Path(d))
                print(table("Ray local, 2 one-CPU actors, vs in-process with 2 threads", ["measure", "in-process", "Ray"], [
                    [f"job of {r['texts_small']} texts, s", f"{r['in_process_small_s']:.1f}",
                     f"{r['ray_small_s']:.1f} (first on a fresh cluster: {r['ray_first_small_s']:.1f})"],
                    [f"job of {r['texts_big']} texts, s", f"{r['in_process_big_s']:.1f}", f"{r['ray_big_s']:.1f}"],
                    ["start-up per job, s", f"{r['in_process_startup_s']:.1f}", f"{r['ray_startup_s']:.1f}"],
                    ["steady state, texts/s", f"{r['in_process_steady_texts_per_s']:.2f}",
                     f"{r['ray_steady_texts_per_s']:.2f} ({r['per_worker_texts_per_s']:.2f} per worker)"],
                    [f"Ray overhead at {r['texts_big']} texts", "", f"{r['overhead']:+.0%}"],
                    ["Ray overhead in the steady state", "", f"{r['steady_overhead']:+.0%}"]]))
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
