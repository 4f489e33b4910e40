"""Heavy work and memory bounded for every visitor, on real servers in public mode (loopback, builtin:seed).

Long forwards wait for a slot of the one job line and are admitted by memory (ATTNVIZ_MAX_TRACE_MB, set small
here): four visitors submitting four long documents at once never hold more than the setting. Sessions keep
keys, never traces, so memory stays within the caches' bounds however many tabs there are and comes back once
they close; so do the server's threads.
"""

import os
import random
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from conftest import start_server
from helpers import Tab
from test_flood import threads
from test_load import WORDS, rss_mb

TRACE_MB = 160  # ATTNVIZ_MAX_TRACE_MB for these servers
LONG_WORDS = 700  # ~700 tokens of builtin:seed: a job of ~86 MB (trace, survey, a tile), four ~344 MB > TRACE_MB
VIEWS_MB = 32  # ATTNVIZ_MAX_VIEWS_MB
ENV = {"ATTNVIZ_PUBLIC": "1", "ATTNVIZ_MAX_TRACE_MB": str(TRACE_MB), "ATTNVIZ_HEAVY_TOKENS": "256", "ATTNVIZ_MAX_JOBS": "4", "ATTNVIZ_MAX_CHARS": "60000",
       "ATTNVIZ_MAX_VIEWS_MB": str(VIEWS_MB), "ATTNVIZ_GC_EVERY_S": "5", "MALLOC_ARENA_MAX": "2"}
HOME_S = 3  # the bound for a fifth visitor's home page while the four run


def document(i: int, words: int = LONG_WORDS) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def peak_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM) in MB since the last ``reset_peak``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux: VmHWM starts again from the current RSS


def long_params(i: int, words: int = LONG_WORDS) -> dict:
    return {"model": "builtin:seed", "text": document(i, words)}


@pytest.fixture(scope="module")
def server():
    proc, url = start_server(ENV)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
    with ExitStack() as tabs:  # warm: the model, the pages' imports, one long forward
        Tab(url, tabs).open("", {})
        Tab(url, tabs).open("Attention", {"model": "builtin:seed", "text": document(99, 300)})  # the long view
        Tab(url, tabs).open("Attention", {"model": "builtin:seed", "text": document(98, 50)})
    time.sleep(6)  # one collection of the warm-up's garbage
    yield proc, url, log
    proc.terminate()
    proc.wait(timeout=30)


def test_four_long_documents_at_once_stay_within_the_memory_setting(server, capsys):
    proc, url, log = server
    base = rss_mb(proc.pid)
    reset_peak(proc.pid)
    results, home = [None] * 4, []
    with ExitStack() as tabs:
        visitors = [Tab(url, tabs) for _ in range(4)]

        def submit(i):
            try:
                results[i] = visitors[i].open("Attention", long_params(i))
            except Exception as e:  # judged below
                results[i] = {"error": f"{type(e).__name__}: {e}"}

        workers = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
        for w in workers:
            w.start()
        time.sleep(1.5)  # the four are in line or running
        start = time.perf_counter()
        shown = Tab(url, tabs).open("", {})
        home.append(time.perf_counter() - start)
        busy = any(w.is_alive() for w in workers)
        for w in workers:
            w.join(300)
    peak = peak_mb(proc.pid)
    with capsys.disabled():
        print(f"\nfour long documents at once: RSS {base:,.0f} MB before, peak {peak:,.0f} MB "
              f"(+{peak - base:,.0f}; ATTNVIZ_MAX_TRACE_MB={TRACE_MB}); home page {home[0]:.2f} s meanwhile; "
              f"{sum(bool(r.get('line')) for r in results)} of 4 waited in line")
    assert all(r and "error" not in r for r in results), (results, "".join(log)[-3000:])
    for r in results:
        assert not r["trouble"] and len(r["charts"]) >= 4, (r, "".join(log)[-3000:])  # all four finished with their page
        assert r["line"] or r["progress"], r  # each saw its place in line or its progress
    assert any("number 1 in line" in body for r in results for body in r["line"]), results
    assert busy, "the four had finished before the home page was asked for"
    assert not shown["trouble"], shown
    assert home[0] < HOME_S, home  # the number, for a fifth visitor meanwhile
    assert peak < base + TRACE_MB, (base, peak)


def test_a_document_over_the_setting_alone_is_refused_with_its_number(server):
    proc, url, log = server
    with ExitStack() as tabs:
        shown = Tab(url, tabs).open("Attention", {"model": "builtin:seed", "text": document(7, 5000)})
    refused = [t.replace("\\", "") for t in shown["trouble"]]  # the message's markdown escapes, undone
    refused = [t for t in refused if "ATTNVIZ_MAX_TRACE_MB" in t]
    assert refused and f"{TRACE_MB:,} MB" in refused[0] and "Try a shorter text" in refused[0], shown
    mb = float(refused[0].split("about ")[1].split(" MB")[0].replace(",", ""))
    assert TRACE_MB < mb < 3 * TRACE_MB, refused  # ~5,000 tokens × ~38 KB, a survey and a tile: ~260 MB


def test_tabs_keep_no_traces_and_memory_and_threads_come_back(server, capsys):
    """12 tabs on Attention with 12 texts, then 8 tabs submitting 8 long texts one after another, all open to
    the end: memory within the caches' bounds; a minute after they close, within 150 MB of where it started."""
    proc, url, log = server
    time.sleep(6)
    base, threads_before = rss_mb(proc.pid), threads(proc.pid)
    reset_peak(proc.pid)
    with ExitStack() as tabs:
        for i in range(12):
            shown = Tab(url, tabs).open("Attention", {"model": "builtin:seed", "text": document(100 + i, 50)})
            assert not shown["trouble"] and len(shown["charts"]) >= 2, shown
        for i in range(8):
            shown = Tab(url, tabs).open("Attention", long_params(200 + i, 300))  # the long view
            assert not shown["trouble"] and len(shown["charts"]) >= 4, shown
        time.sleep(6)  # a collection: what is left is what someone holds
        open_mb, peak = rss_mb(proc.pid), peak_mb(proc.pid)
        threads_open = threads(proc.pid)
    time.sleep(60)
    after, threads_after = rss_mb(proc.pid), threads(proc.pid)
    # The caches' bounds: 8 Attention traces of ~53 tokens (2.5 MB each with their dense weights), the views, two
    # long traces of ~303 tokens with their surveys (~46 MB each as a job); 8 tabs keeping theirs would add ~240 MB.
    bound = 8 * 3 + VIEWS_MB + 2 * 46
    with capsys.disabled():
        print(f"\n12 Attention tabs then 8 long texts: RSS {base:,.0f} MB before, {open_mb:,.0f} MB with all open "
              f"(peak {peak:,.0f}; bound +{bound}), {after:,.0f} MB a minute after they closed; threads "
              f"{threads_before} before, {threads_open} open, {threads_after} after")
    assert open_mb < base + bound, (base, open_mb)
    assert after < base + 150, (base, after)
    assert threads_after <= threads_before + 3, (threads_before, threads_open, threads_after)


def own_rss_mb() -> float:
    return rss_mb(os.getpid())


def wait_for(check, timeout: float = 30.0) -> float:
    """Seconds until ``check()`` holds (polled every 10 ms); a TimeoutError after ``timeout``."""
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise TimeoutError(check)
        time.sleep(0.01)
    return time.perf_counter() - start


def test_a_heavy_forward_takes_the_warm_reserve_and_the_server_touches_it_again_after(monkeypatch):
    """The reserve is memory really touched (the process's RSS holds it), handed back before a heavy job that
    declares its memory runs (RSS falls by it inside the job), and touched again once the job has ended with the line
    idle, after its page has had REFILL_AFTER_S to draw; a job that declares no memory leaves it alone, and one that
    was stopped touches nothing after it."""
    from attnviz.ui import collect, jobs

    monkeypatch.setenv("ATTNVIZ_WARM_MB", "96")
    monkeypatch.setenv("ATTNVIZ_HEAVY_TOKENS", "64")
    collect.release()  # whatever an earlier page's server start filled
    bare = own_rss_mb()
    collect.refill(0)
    wait_for(lambda: collect.reserved_mb() == 96)
    warm = own_rss_mb()
    assert warm - bare > 90, (bare, warm)  # touched, not only mapped
    with jobs.slot("Training"):  # no memory declared: the reserve stays
        assert collect.reserved_mb() == 96
    with jobs.for_tokens(200, lambda n: 50.0):
        inside = (collect.reserved_mb(), own_rss_mb())
    ended = time.perf_counter()
    assert inside[0] == 0 and warm - inside[1] > 90, (warm, inside)
    wait_for(lambda: collect.reserved_mb() == 96)
    assert time.perf_counter() - ended >= collect.REFILL_AFTER_S
    assert own_rss_mb() - inside[1] > 90
    with jobs.for_tokens(10, lambda n: 50.0):  # a short text runs beside the line: the reserve stays
        assert collect.reserved_mb() == 96
    with pytest.raises(KeyboardInterrupt), jobs.for_tokens(200, lambda n: 50.0):
        raise KeyboardInterrupt  # a job stopped (Streamlit raises in it for a closed tab): the server stays idle
    time.sleep(collect.REFILL_AFTER_S + 1)
    assert collect.reserved_mb() == 0
    collect.release()


def test_a_release_stops_a_fill_under_way_and_no_reserve_is_kept_when_set_to_0(monkeypatch):
    from attnviz.ui import collect

    collect.release()
    monkeypatch.setenv("ATTNVIZ_WARM_MB", "0")
    collect.refill(0)
    time.sleep(0.5)
    assert collect.reserved_mb() == 0
    monkeypatch.setenv("ATTNVIZ_WARM_MB", "4096")  # 128 mappings: the release comes while they are touched
    collect.refill(0)
    wait_for(lambda: collect.reserved_mb() > 0)
    collect.release()
    time.sleep(0.5)
    assert collect.reserved_mb() == 0


def test_a_survey_keeps_its_trace_when_other_sessions_evict_it(monkeypatch):
    """The page holds its trace mid-run; two other documents push it out of the kept two: its survey still comes."""
    from attnviz.ui import long

    monkeypatch.setenv("ATTNVIZ_HEAVY_TOKENS", "100000")  # outside a script run: no line to wait in
    long._LONG.clear()
    stack = long.surveyed_trace("builtin:seed", document(1, 120), 4096).stack(None)
    for i in (2, 3):
        long.surveyed_trace("builtin:seed", document(i, 60), 4096)
    assert all(e.trace.stack(None).weights is not stack.weights for e in long._LONG.values())  # evicted
    s = long.cached_survey(stack, 8)
    L, H, T = *stack.weights.shape[:2], stack.queries.n_tokens
    assert s.received.shape == (L, H, T)
    assert abs(s.received[0, 0].sum() - T) < 1e-3  # every query row gives away a weight of 1 in all
    again = long.surveyed_trace("builtin:seed", document(1, 120), 4096)
    assert again.stack(None).weights is stack.weights  # found again, not redone
    long._LONG.clear()


@pytest.mark.parametrize("page", ["pages/1_Attention.py", "pages/7_Roles.py", "pages/4_Analysis.py"])
def test_a_session_keeps_no_trace_once_the_caches_let_go(page):
    """Callbacks, fragments and results in session state held the page's trace; now only the shared caches do."""
    import gc

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from attnviz.core.trace import AttentionTrace
    from attnviz.ui import derived, traces

    at = AppTest.from_file("../../app.py", default_timeout=300)
    at.switch_page(page)
    at.run()
    words = 300 if page == "pages/1_Attention.py" else 40  # the Attention page's long view: its fragment, callbacks
    texts = [document(300 + i, words) for i in range(2)]
    for text in texts:
        at.text_area(key="text").set_value(text).run()
        assert not at.exception, at.exception
    st.cache_resource.clear()
    traces.STORE.clear()  # the one store of traces: cell by cell and long
    derived.clear()
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, AttentionTrace) and o.text in texts]
    assert at.session_state["text"] and not alive, len(alive)  # the session is still open


def test_a_closed_tab_stops_its_long_forward_at_the_next_tile(server):
    from test_jobs import cpu_seconds

    proc, url, log = server
    tabs = ExitStack()
    tab = Tab(url, tabs)
    tab.send("Attention", long_params(400, 2000))  # ~2,000 tokens (~141 MB): seconds of forward
    tab.read_until(lambda el: el.startswith("progress"), timeout=120)  # the forward's progress bar: it runs
    busy_from = cpu_seconds(proc.pid)
    time.sleep(1)
    busy = cpu_seconds(proc.pid) - busy_from
    tabs.close()
    time.sleep(2)  # the forward stops at its next tile
    idle_from = cpu_seconds(proc.pid)
    time.sleep(3)
    idle = (cpu_seconds(proc.pid) - idle_from) / 3
    assert busy > 0.5, busy  # the measurement sees the forward
    assert idle < 0.3, idle  # and nothing runs once the tab is gone


# Every page's own forward (the shared frame's stored_trace: Home, here, reads a text's first ATTNVIZ_PAGE_TOKENS),
# with the heavy threshold lowered: the same line and memory as a long trace.
FRAME_ENV = {"ATTNVIZ_MAX_TOKENS": "4096", "ATTNVIZ_HEAVY_TOKENS": "64", "ATTNVIZ_MAX_CHARS": "60000"}


def frame_page(monkeypatch, **env):
    """The home page (the Attention page traces a text over 256 tokens with surveyed_trace, not the frame's)."""
    from streamlit.testing.v1 import AppTest

    for k, v in {**FRAME_ENV, **env}.items():
        monkeypatch.setenv(k, v)
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.query_params["model"] = "builtin:seed"
    return at


def test_a_long_text_too_big_for_the_memory_setting_is_refused_on_any_page(monkeypatch):
    from attnviz.backends import footprint
    from attnviz.backends import open_model

    text = document(500, 300)
    at = frame_page(monkeypatch, ATTNVIZ_MAX_TRACE_MB="4")
    at.query_params["text"] = text
    at.run()
    assert not at.exception, at.exception
    mb = footprint.trace_mb(open_model("builtin:seed"), footprint.n_tokens(open_model("builtin:seed"), text, 4096))
    assert mb > 4, mb  # ~303 tokens × ~38 KB
    errors = [e.value.replace("\\", "") for e in at.error]
    assert any(f"This 303-token text would hold about {mb:,.0f} MB" in e and "of 4 MB (ATTNVIZ_MAX_TRACE_MB)" in e
               for e in errors), errors
    assert not at.get("plotly_chart")
    assert at.text_area(key="text").value == text


def test_under_a_tight_setting_the_survey_reads_smaller_tiles_and_the_same_numbers(monkeypatch):
    """Large survey tiles (fewer operations) where a job with them fits ATTNVIZ_MAX_TRACE_MB; one TILE_FLOATS where
    only that fits: the ~2,000-token text of the closed-tab test runs under 160 MB, and both surveys agree."""
    from attnviz.analysis import long
    from attnviz.backends import open_model
    from attnviz.ui import long as ui_long
    from test_long_analysis import assert_same_survey

    model = open_model("builtin:seed")
    big, small = ui_long._job_mb(model, 2000), ui_long._job_mb(model, 2000, tiles=1)
    assert small < TRACE_MB < big, (small, big)
    monkeypatch.setenv("ATTNVIZ_MAX_TRACE_MB", str(TRACE_MB))
    assert ui_long._tiles(model, 2000) == 1 and ui_long._tiles(model, 700) == long.SURVEY_TILES
    monkeypatch.setenv("ATTNVIZ_MAX_TRACE_MB", str(int(big) + 1))
    assert ui_long._tiles(model, 2000) == long.SURVEY_TILES
    text = document(502, 1200)
    (trace, large), (_, one) = (long.trace_with_survey(model, text, 4096, 256, tiles=t) for t in (long.SURVEY_TILES, 1))
    L, H, T, _ = trace.stack(None).weights.shape
    b = long.block_size(T, 256)
    assert long.survey_tile(H, T, b, 1)[0] < long.survey_tile(H, T, b)[0] <= T  # they did tile differently
    assert_same_survey(large.result(64), one.result(64), rtol=1e-5)


def test_a_cached_long_text_never_waits_in_line_and_a_new_one_waits_its_turn(monkeypatch):
    """The one slot held by another job: a rerun over the cached trace renders at once, a new long text waits."""
    from attnviz.ui import jobs

    at = frame_page(monkeypatch, ATTNVIZ_MAX_JOBS="1")
    at.query_params["text"] = document(501, 300)
    at.run()
    assert not at.exception and not at.error and at.get("plotly_chart"), (at.exception, at.error)
    held, release, seen = threading.Event(), threading.Event(), []

    def other_job():
        with jobs.slot("Another visitor's text"):
            held.set()
            release.wait(120)

    def watch():  # the new text's place in line, then the other job ends
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen:
            if jobs.waiting():
                seen.append(jobs.waiting())
            time.sleep(0.05)
        release.set()

    holder = threading.Thread(target=other_job)
    holder.start()
    try:
        assert held.wait(30)
        at.run(timeout=60)  # a slot taken here would wait until the timeout
        assert not at.exception and not at.error and at.get("plotly_chart"), (at.exception, at.error)
        assert jobs.running() == 1 and not jobs.waiting()  # the other job still holds the slot
        watcher = threading.Thread(target=watch)
        watcher.start()
        at.text_area(key="text").set_value(document(502, 300)).run()
        watcher.join()
    finally:
        release.set()
        holder.join()
    assert seen == [1], seen  # the new text was first in line while the other job ran
    assert not at.exception and not at.error and at.get("plotly_chart"), (at.exception, at.error)
    assert "303 tokens" in at.caption[0].value


def test_a_long_text_on_any_page_waits_in_line_behind_another_visitor_and_then_finishes():
    """One slot; another visitor's long document runs on the Attention page: an Attention page over another long
    text is told its place in line, then draws its charts once that forward is done."""
    proc, url = start_server({**FRAME_ENV, "ATTNVIZ_HEAVY_TOKENS": "256", "ATTNVIZ_MAX_JOBS": "1",
                              "ATTNVIZ_MAX_TRACE_MB": "1024"})
    try:
        with ExitStack() as tabs:
            Tab(url, tabs).open("Attention", {"model": "builtin:seed", "text": document(97, 50)})  # warm
            first = Tab(url, tabs)
            first.send("Attention", long_params(600, 4000))  # ~4,000 tokens: seconds of forward
            first.read_until(lambda el: el.startswith("progress"), timeout=120)  # its progress bar: it holds the slot
            shown = Tab(url, tabs).open("Attention", long_params(601, 400))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert any("This 403-token text is number 1 in line" in body for body in shown["line"]), shown
    assert not shown["trouble"] and len(shown["charts"]) >= 2, shown


def test_the_frame_cache_traces_count_against_the_memory_setting_and_make_room(monkeypatch):
    """A page's kept trace is held memory; a job that fits only without it drops it from the cache."""
    import gc

    from attnviz.core.trace import AttentionTrace
    from attnviz.ui import frame, jobs, traces

    monkeypatch.setenv("ATTNVIZ_MAX_TOKENS", "4096")
    monkeypatch.setenv("ATTNVIZ_HEAVY_TOKENS", "100000")  # outside a script run: no line to wait in
    traces.STORE.clear()
    gc.collect()
    before = jobs.held_mb()
    text = document(510, 300)
    trace = frame.stored_trace("builtin:seed", text)
    mb = trace.nbytes / 2**20
    assert mb > 10 and abs(jobs.held_mb() - before - mb) < 1e-6, (before, mb, jobs.held_mb())
    assert frame.stored_trace("builtin:seed", text) is trace  # cached
    del trace
    monkeypatch.setenv("ATTNVIZ_MAX_TRACE_MB", str(before + mb))
    held = []

    def job():
        with jobs.slot("A job of the same size", mb):  # fits only once the kept trace is gone
            held.append(jobs.held_mb() - before)

    worker = threading.Thread(target=job, daemon=True)  # a job that never fits stays behind, not the test
    worker.start()
    worker.join(30)
    assert held and held[0] < mb + 1e-6, (held, mb)
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, AttentionTrace) and o.text == text]  # dropped and freed
