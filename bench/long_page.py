"""The Attention page's long view at 4,096 tokens of ``builtin:seed``, server side, in one process (issue 34): the
bare forward against what the page does before its overview and detail can be drawn (the forward with the survey
inside, the survey's result, the mosaic, the block map, the exact window and both figures' JSON), with a verdict
against the goal of 1.5 × the bare forward + 1 s. The browser's share is not in it (``bench/long_browser.py``).

The process allocates as the app's server does (``attnviz.ui.collect``: glibc's mmap threshold held at 64 KiB, so
every block above it is fresh memory the kernel faults in; torch's huge pages from ``bench/common.py``);
``BENCH_MALLOC=default`` leaves glibc's own threshold. Page faults, system and CPU time are reported per step
(``BENCH_THREADS=1`` makes CPU seconds the reading that other processes on this shared machine barely move).

A browser beside the server takes CPU while the forward runs (Chromium drew 28–60 frames a second there, 15–60% of
a core), and each of torch's two-thread operations then waits for its slower thread. ``BENCH_HOG=0.3`` runs a
process beside this one that keeps one core busy that share of the time (in 20 ms periods), for every step alike.

Run: ``python bench/long_page.py [tokens] [rounds]`` (default 4096 5); ``--profile`` adds a cProfile of one page
run and the torch operators of one traced forward. Writes bench/out/long_page.json.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time

import torch

from common import DETAIL, app_malloc, builtin_bare, conditions, save, table, text_of, tokenizer

import attnviz
from attnviz.analysis import long
from attnviz.backends.common import encode
from attnviz.figures import long as figs

APP_MALLOC = os.environ.get("BENCH_MALLOC", "app") != "default"
if APP_MALLOC:
    app_malloc()


def page(model, text: str, n: int) -> dict:
    """Seconds of each step the page takes from submit to its overview and detail sent, for one submit."""
    out, t0 = {}, time.perf_counter()
    trace, reducer = long.trace_with_survey(model, text, n, DETAIL)
    out["traced forward (survey inside)"] = time.perf_counter() - t0
    L, H = trace.n_layers, trace.n_heads
    t = time.perf_counter()
    s = reducer.result(figs.overview_size(L, H))
    out["survey result"] = time.perf_counter() - t
    t = time.perf_counter()
    mosaic = figs.head_mosaic(s.pooled("overview", "max"), "max", n, s.block("overview"), (0, None))
    mosaic.to_json()
    out["overview figure + JSON"] = time.perf_counter() - t
    t = time.perf_counter()
    weights = trace.stack(None).weights
    blocks = figs.blocks_heatmap(s.layer_max[0], s.starts["detail"], s.block("detail"), n, "", "max", (0, 64))
    blocks.to_json()
    w = long.window(weights, 0, None, 0, 64)
    figs.window_heatmap(w, 0, trace.tokens, "").to_json()
    out["detail figures + JSON"] = time.perf_counter() - t
    out["page total"] = time.perf_counter() - t0
    return out


HOG = """
import sys, time
busy, period = float(sys.argv[1]) * 0.02, 0.02
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < busy:
        pass
    time.sleep(period - busy)
"""


def hog(share: float):
    """A process that keeps one core busy ``share`` of the time, or None for 0."""
    return subprocess.Popen([sys.executable, "-c", HOG, str(share)]) if share > 0 else None


def measure(n: int = 4096, rounds: int = 5) -> dict:
    model = attnviz.load("builtin:seed")
    text = text_of(tokenizer(), n)
    ids = torch.tensor([encode(model.tokenizer, text, n).ids])  # (1, T)
    bare = builtin_bare(model.net)

    def timed(fn):
        """Seconds, minor page faults, system and CPU seconds of ``fn()``; its result."""
        r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        out = fn()
        dt, r1 = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
        cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        return (dt, r1.ru_minflt - r0.ru_minflt, r1.ru_stime - r0.ru_stime, cpu), out

    page(model, text, n), bare(ids)  # warm up
    runs, faults, system, cpu = {}, {}, {}, {}
    for i in range(rounds):  # in turn, so that load hits each alike
        steps = {"bare forward": timed(lambda: bare(ids))[0],
                 "plain trace (no survey)": timed(lambda: model.trace(text, max_tokens=n))[0]}
        whole, times = timed(lambda: page(model, text, n))
        steps.update({k: (v, 0, 0.0, 0.0) for k, v in times.items()})
        steps["page total"] = whole
        for k, (dt, flt, sys_s, cpu_s) in steps.items():
            runs.setdefault(k, []).append(dt)
            faults.setdefault(k, []).append(flt)
            system.setdefault(k, []).append(sys_s)
            cpu.setdefault(k, []).append(cpu_s)
    med = {k: statistics.median(v) for k, v in runs.items()}
    goal = 1.5 * med["bare forward"] + 1.0
    return {"tokens": n, "rounds": rounds, "app_malloc": APP_MALLOC, "times_s": runs, "median_s": med,
            "faults": {k: statistics.median(v) for k, v in faults.items()},
            "system_s": {k: statistics.median(v) for k, v in system.items()},
            "cpu_s": {k: statistics.median(v) for k, v in cpu.items()}, "goal_s": goal,
            "hit": med["page total"] <= goal}


def profile(n: int = 4096) -> str:
    """cProfile of one page run (cumulative, top 25) and the torch operators of one traced forward."""
    import cProfile
    import io
    import pstats

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    model = attnviz.load("builtin:seed")
    text = text_of(tokenizer(), n)
    page(model, text, n)
    prof = cProfile.Profile()
    prof.enable()
    page(model, text, n)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    with torch_profile(activities=[ProfilerActivity.CPU]) as tp:
        long.trace_with_survey(model, text, n, DETAIL)
    return buf.getvalue() + "\n" + tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)


def report(r: dict) -> str:
    med, bare = r["median_s"], r["median_s"]["bare forward"]
    rows = [[k, f"{v:.3f}", f"{v / bare:.2f}", " / ".join(f"{x:.2f}" for x in r["times_s"][k]),
             *([f"{r['faults'][k]:,.0f}", f"{r['system_s'][k]:.2f}", f"{r['cpu_s'][k]:.2f}"] if r["faults"][k] else
               ["", "", ""])]
            for k, v in med.items()]
    verdict = "HIT" if r["hit"] else "MISS"
    malloc = "the app's malloc (mmap threshold 64 KiB)" if r["app_malloc"] else "glibc's default malloc"
    return (table(f"Long page, builtin:seed, {r['tokens']:,} tokens, medians of {r['rounds']}, {malloc}",
                  ["step", "median s", "× bare", "each run", "page faults", "system s", "CPU s"], rows)
            + f"\n\ngoal 1.5 × bare + 1 s = {r['goal_s']:.2f} s; page {med['page total']:.2f} s: **{verdict}**")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 4096
    rounds = int(args[1]) if len(args) > 1 else 5
    share = float(os.environ.get("BENCH_HOG", "0") or 0)
    beside = hog(share)
    try:
        res = {"conditions": conditions(), "hog": share, **measure(n, rounds)}
    finally:
        if beside is not None:
            beside.kill()
    save("long_page", res)
    print(f"load {res['conditions']['load_avg_1m']}, {res['conditions']['torch_threads']} torch threads, "
          f"a process beside it busy {share:.0%} of one core")
    print(report(res))
    if "--profile" in sys.argv:
        print(profile(n))
