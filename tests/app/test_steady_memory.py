"""The server's memory once visitors leave is a ceiling, not a leak (issue 58): what stays is what the server shares
by design, the kept traces (the two latest long texts, all within ATTNVIZ_MAX_TRACE_MB), the views
(ATTNVIZ_MAX_VIEWS_MB) and the models and warm reserve an idle server already holds. So after any number of long
visitors have come and gone, RSS stays within an idle warm server's plus those budgets plus a fixed margin, and a
second wave of visitors leaves no more behind than the first (a real server in public mode, loopback, builtin:seed)."""

import threading
import time
from contextlib import ExitStack

from conftest import start_server
from helpers import Tab
from test_admission import document, long_params
from test_load import rss_mb

TRACE_MB = 200  # two kept ~700-token traces with their surveys and two running jobs (~86 MB each) need eviction
VIEWS_MB = 32
MARGIN_MB = 100  # the heap's slack, a page run's garbage between two collections, the sessions' small state
LONG_WORDS = 700  # ~700 tokens: a leak of a wave's three traces would add ~200 MB
ENV = {"ATTNVIZ_PUBLIC": "1", "ATTNVIZ_MAX_TRACE_MB": str(TRACE_MB), "ATTNVIZ_MAX_VIEWS_MB": str(VIEWS_MB),
       "ATTNVIZ_HEAVY_TOKENS": "256", "ATTNVIZ_MAX_CHARS": "60000", "ATTNVIZ_GC_EVERY_S": "3"}
SETTLE_S = 10  # a collection, and the warm reserve touched again (collect.REFILL_AFTER_S after the last job)


def wave(url: str, first: int, n: int = 3) -> list[dict]:
    """``n`` long visitors at once, each on its own text, until their pages are drawn; then they all leave."""
    shown: list = [None] * n
    with ExitStack() as tabs:
        visitors = [Tab(url, tabs, pings=False) for _ in range(n)]  # no pings to miss on a busy machine

        def visit(i):
            try:
                shown[i] = visitors[i].open("Attention", long_params(first + i, LONG_WORDS), timeout=600)
            except Exception as e:  # judged below
                shown[i] = {"error": f"{type(e).__name__}: {e}"}

        workers = [threading.Thread(target=visit, args=(i,)) for i in range(n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(700)
    return shown


def test_memory_after_visitors_leave_stays_within_the_shared_budgets(capsys):
    proc, url = start_server(ENV)
    try:
        with ExitStack() as tabs:  # warm: the model, the page's imports, one long view
            Tab(url, tabs).open("Attention", {"model": "builtin:seed", "text": document(90, 300)})
        time.sleep(SETTLE_S)
        idle = rss_mb(proc.pid)
        after = []
        for first in (100, 200):
            shown = wave(url, first)
            assert all("error" not in s and not s["trouble"] and len(s["charts"]) >= 4 for s in shown), shown
            time.sleep(SETTLE_S)
            after.append(rss_mb(proc.pid))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ceiling = idle + TRACE_MB + VIEWS_MB + MARGIN_MB
    with capsys.disabled():
        print(f"\nRSS of the warm idle server {idle:,.0f} MB; after 3 long visitors left {after[0]:,.0f} MB, after 6 "
              f"{after[1]:,.0f} MB (ceiling {ceiling:,.0f} MB)")
    assert max(after) < ceiling, (idle, after)
    assert after[1] < after[0] + 64, after  # the second wave left no more behind than the first
