"""Many visitors at once on a fresh public-mode server (issue 58's reliability probe, again): 6 or 8 long visitors
(4,096-token texts on builtin:seed, the Attention page's long view) submit together with 2 short ones (a 40-word text on
the default model). Per run: how many of each finished their page, the short visitors' time to their first figure
against the same on the idle server, the server's peak RSS, and its RSS when they close and 60 / 180 s after.

Visitors are websocket sessions without a browser (tests/helpers.py ``Tab``), on loopback; the server runs as the
Dockerfile runs it (public mode; ATTNVIZ_MAX_CHARS raised so a 4,096-token text fits the text box). Run:
``python bench/visitors.py`` (~9 min; BENCH_QUICK=1: 6 long visitors only, 60 s after). Writes bench/out/visitors.json.
"""

from __future__ import annotations

import random
import statistics
import sys
import threading
import time
from contextlib import ExitStack

from common import ROOT, conditions, quick, save, table, text_of, tokenizer

sys.path.insert(0, str(ROOT / "tests"))
from conftest import start_server  # noqa: E402
from helpers import Tab  # noqa: E402
from test_admission import peak_mb, reset_peak  # noqa: E402
from test_load import WORDS, rss_mb  # noqa: E402

LONG_TOKENS = 4096
LONGS = (6,) if quick() else (6, 8)
SHORTS = 2
AFTER_S = (60,) if quick() else (60, 180)  # RSS read this long after the visitors close
ENV = {"ATTNVIZ_PUBLIC": "1", "ATTNVIZ_MAX_CHARS": "60000",
       "ATTNVIZ_WARM_MB": "512"}  # the reserve its rounds measured with (off by default)
VISIT_S = 900  # the most one visitor waits for its page (all of them run at most this long)


def short_text(i: int) -> str:
    return " ".join(random.Random(i).choice(WORDS) for _ in range(40)) + "."


def first_figure(url: str, tabs: ExitStack, i: int) -> dict:
    """A short visitor: seconds from submit to the first chart, then whether the page finished without trouble."""
    tab = Tab(url, tabs, pings=False)  # a browser sends no pings: a busy server never loses it for one
    start = time.perf_counter()
    tab.send("Attention", {"text": short_text(i)})
    tab.read_until(lambda el: el.startswith("plotly_chart"), timeout=VISIT_S)
    seconds = time.perf_counter() - start
    rest = tab.read(VISIT_S)
    return {"first_figure_s": seconds, "done": not rest["trouble"]}


def long_visit(url: str, tabs: ExitStack, i: int, text: str) -> dict:
    tab = Tab(url, tabs, pings=False)  # a browser sends no pings: a busy server never loses it for one
    start = time.perf_counter()
    shown = tab.open("Attention", {"model": "builtin:seed", "text": text}, timeout=VISIT_S)
    return {"seconds": time.perf_counter() - start, "done": not shown["trouble"] and len(shown["charts"]) >= 4,
            "waited": bool(shown["line"]), "trouble": shown["trouble"][:1]}


def visitors(n_long: int, tok) -> dict:
    proc, url = start_server(ENV)
    log: list[str] = []  # the server's stderr, read as it comes: a full pipe would stop the server
    threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
    try:
        with ExitStack() as tabs:  # warm: both models, the Attention page's imports, the long view's
            Tab(url, tabs).open("Attention", {"text": short_text(900)})
            Tab(url, tabs).open("Attention", {"model": "builtin:seed", "text": text_of(tok, 600, 90)})
        time.sleep(8)  # a collection of the warm-up's garbage; the warm reserve refilled
        idle = []
        with ExitStack() as tabs:
            for i in range(3):
                idle.append(first_figure(url, tabs, 800 + i)["first_figure_s"])
        base = rss_mb(proc.pid)
        reset_peak(proc.pid)
        texts = [text_of(tok, LONG_TOKENS, v) for v in range(n_long)]
        results: dict = {}
        tabs = ExitStack()

        def run(name, fn, *args):
            try:
                results[name] = fn(url, tabs, *args)
            except Exception as e:  # counted as not done, and said
                results[name] = {"done": False, "error": f"{type(e).__name__}: {e}"[:200]}

        workers = [threading.Thread(target=run, args=(f"long{i}", long_visit, i, t)) for i, t in enumerate(texts)]
        for w in workers:
            w.start()
        time.sleep(1.0)  # the long ones are in line or running when the short ones come
        shorts = [threading.Thread(target=run, args=(f"short{i}", first_figure, 700 + i)) for i in range(SHORTS)]
        for w in shorts:
            w.start()
        for w in workers + shorts:
            w.join(VISIT_S)
        peak, open_mb = peak_mb(proc.pid), rss_mb(proc.pid)
        tabs.close()
        closed = time.monotonic()
        after = {}
        for s in AFTER_S:
            time.sleep(max(0.0, closed + s - time.monotonic()))
            after[s] = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    longs = [results.get(f"long{i}", {"done": False}) for i in range(n_long)]
    short = [results.get(f"short{i}", {"done": False}) for i in range(SHORTS)]
    firsts = [s["first_figure_s"] for s in short if "first_figure_s" in s]
    idle_s = statistics.median(idle)
    return {"long": n_long, "short": SHORTS, "long_done": sum(r["done"] for r in longs),
            "long_waited": sum(bool(r.get("waited")) for r in longs),
            "long_s": [r.get("seconds") for r in longs], "short_done": sum(r["done"] for r in short),
            "short_first_s": firsts, "idle_first_s": idle, "ratio": [f / idle_s for f in firsts],
            "rss_base_mb": base, "rss_peak_mb": peak, "rss_open_mb": open_mb,
            "rss_after_mb": {str(s): v for s, v in after.items()},
            "errors": [r.get("error") or r.get("trouble") for r in longs + short if not r["done"]],
            "server_log": "".join(log)[-3000:]}


def run() -> dict:
    tok = tokenizer()
    rows = []
    for n in LONGS:
        rows.append(visitors(n, tok))
        print(f"  {n} long visitors: {rows[-1]['long_done']} done, short first figure "
              f"{rows[-1]['short_first_s']} s; not done: {rows[-1]['errors']}", file=sys.stderr)
    result = {"conditions": conditions(), "quick": quick(), "rows": rows}
    save("visitors", result)
    return result


def report(result: dict) -> str:
    def mb(v):
        return f"{v:,.0f}"

    rows = [[f"{r['long']} + {r['short']}", f"{r['long_done']}/{r['long']} ({r['long_waited']} of them told their place)",
             f"{r['short_done']}/{r['short']}",
             " / ".join(f"{s:.2f}" for s in r["short_first_s"]) + f" (idle {statistics.median(r['idle_first_s']):.2f})",
             " / ".join(f"{x:.1f}" for x in r["ratio"]), mb(r["rss_base_mb"]), mb(r["rss_peak_mb"]),
             mb(r["rss_open_mb"]), " / ".join(mb(v) for v in r["rss_after_mb"].values())]
            for r in result["rows"]]
    return table(f"Long visitors ({LONG_TOKENS:,} tokens, builtin:seed) with short ones (40 words, the default model), "
                 "fresh public-mode server each", [
                     "long + short", "long done", "short done", "short first figure, s", "÷ idle",
                     "RSS before, MB", "peak", "at close", " / ".join(f"{s} s after" for s in AFTER_S)], rows)


if __name__ == "__main__":
    print(report(run()))
