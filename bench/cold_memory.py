"""What fresh memory costs on this machine, touched right after the same amount was freed ("hot") or after an idle
pause ("after a pause"), and what that does to the Attention page's 4,096-token forward (issue 34).

The goal for that page is 1.5 × the bare forward + 1 s, with the bare forward timed back to back (hot), as every
bench here times it; a server's submit comes after the visitor typed, and this VM returns memory a process freed to
its host once it has been free a moment (virtio-balloon free page reporting, ``page_reporting_order`` on the
kernel's command line), so every page the next forward touches is faulted in again through the hypervisor. The
traced forward keeps its trace (queries, keys, hidden states: ~150 MB at 4,096 tokens of ``builtin:seed``) and
its survey, so it touches more fresh memory than the bare forward, which frees each layer's tensors as it goes.

Rows: 300 MB of tensors touched; ``builtin:seed``'s bare forward and the page's traced forward (the survey inside)
at 4,096 tokens, each alternating hot and after a PAUSE_S pause; and the traced forward's first run at 4,096
tokens in a fresh process (after a 300-token one, as a fresh server warmed by a short text) against its second.
The process allocates as the app's server does (``attnviz.ui.collect``'s mmap threshold; torch's huge pages).

Run: ``python bench/cold_memory.py`` (BENCH_QUICK=1: fewer rounds). Writes bench/out/cold_memory.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from common import DETAIL, app_malloc, builtin_bare, conditions, quick, save, table, text_of, tokenizer, touch

import attnviz
from attnviz.analysis import long

app_malloc()

N = 4096
TOUCH_MB = 300
PAUSE_S = 6.0  # the kernel reports free memory to the host 2 s after it is freed


def alternate(fn, rounds: int) -> dict:
    """``fn()`` seconds, hot (right after the previous run) and after a PAUSE_S pause, in turn."""
    fn()
    out = {"hot": [], "paused": []}
    for r in range(2 * rounds):
        paused = r % 2 == 1
        if paused:
            time.sleep(PAUSE_S)
        out["paused" if paused else "hot"].append(fn())
    return out


def first_in_process() -> dict:
    """In a fresh process: the traced forward at N tokens, first and second, after a 300-token one."""
    tok = tokenizer()
    model = attnviz.load("builtin:seed")
    long.trace_with_survey(model, text_of(tok, 300, 97), N, DETAIL)
    runs = []
    for i in range(2):
        t = time.perf_counter()
        long.trace_with_survey(model, text_of(tok, N, 10 + i), N, DETAIL)
        runs.append(time.perf_counter() - t)
    return {"first": runs[0], "second": runs[1]}


def run() -> dict:
    rounds = 2 if quick() else 4
    tok = tokenizer()
    model = attnviz.load("builtin:seed")
    bare = builtin_bare(model.net)
    text = text_of(tok, N)
    ids = torch.tensor([model.tokenizer(text).input_ids[:N]])

    def timed(fn):
        def go():
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
        return go

    result = {"conditions": conditions(), "kernel": kernel(), "pause_s": PAUSE_S, "tokens": N}
    result["touch"] = alternate(lambda: touch(TOUCH_MB), rounds)
    result["bare"] = alternate(timed(lambda: bare(ids)), rounds)
    result["traced"] = alternate(timed(lambda: long.trace_with_survey(model, text, N, DETAIL)), rounds)
    del model, bare
    fresh = []
    for _ in range(2 if quick() else 3):
        out = subprocess.run([sys.executable, __file__, "--first"], capture_output=True, text=True, check=True)
        fresh.append(json.loads(out.stdout.strip().splitlines()[-1]))
    result["fresh_process"] = fresh
    save("cold_memory", result)
    return result


def kernel() -> str:
    """The kernel's free page reporting setting, if any (what makes idle memory cold here)."""
    try:
        words = Path("/proc/cmdline").read_text().split()
    except OSError:
        return "unknown"
    return " ".join(w for w in words if "page_reporting" in w) or "no page_reporting setting"


def report(r: dict) -> str:
    med = statistics.median
    rows = []
    for name, label in (("touch", f"{TOUCH_MB} MB of fresh 8 MB tensors filled"),
                        ("bare", f"bare forward, builtin:seed, {N:,} tokens"),
                        ("traced", f"traced forward with the survey (the page's), {N:,} tokens")):
        hot, paused = med(r[name]["hot"]), med(r[name]["paused"])
        rows.append([label, f"{hot:.3f}", f"{paused:.3f}", f"{paused - hot:+.3f}",
                     " / ".join(f"{x:.2f}" for x in r[name]["hot"]), " / ".join(f"{x:.2f}" for x in r[name]["paused"])])
    out = table(f"Fresh memory, hot and after a {r['pause_s']:.0f} s pause (s; medians; the app's malloc; "
                f"kernel: {r['kernel']})", ["what", "hot", "after a pause", "difference", "hot runs", "paused runs"],
                rows)
    fresh = r["fresh_process"]
    first, second = med(f["first"] for f in fresh), med(f["second"] for f in fresh)
    out += table(f"The traced forward at {N:,} tokens in a fresh process, after a 300-token one (s)",
                 ["first", "second", "difference", "each process (first / second)"],
                 [[f"{first:.2f}", f"{second:.2f}", f"{first - second:+.2f}",
                   ", ".join(f"{f['first']:.2f} / {f['second']:.2f}" for f in fresh)]])
    touch_ms = (med(r["touch"]["paused"]) - med(r["touch"]["hot"])) / TOUCH_MB * 1e3
    out += (f"\n\nFresh memory after a pause costs {touch_ms:.2f} ms a MB more than hot memory here; the Attention "
            f"page's goal at {N:,} tokens is judged against the hot bare forward (bench/long_browser.py).\n")
    return out


if __name__ == "__main__":
    if "--first" in sys.argv:
        print(json.dumps(first_in_process()))
    else:
        print(report(run()))
