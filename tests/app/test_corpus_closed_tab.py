"""A corpus job in a tab that closes, on a real server (loopback): the job stops within a batch, its finished
shards are kept untouched, and the same run from a new tab resumes from them and equals the library's numbers.

The in-process twin (tests/unit/test_corpus_shards.py) raises from ``tick``; here nothing raises but Streamlit itself:
a closed websocket asks the session's script to stop, and the page's progress bar, drawn before every batch, is
where it does. Long texts (4,400 characters, read to their first 256 tokens as the page does with
ATTNVIZ_PAGE_TOKENS) make shards of 30 texts, two batches each, so a stop at a shard's end would show as one
more finished shard.
"""

import hashlib
import random
import time
from contextlib import ExitStack

import numpy as np
import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState

from attnviz import corpus as cp
from conftest import start_server
from helpers import Tab
from test_corpus_shards import same
from test_jobs import cpu_seconds

N_TEXTS = 150
SHARD = 30  # texts a shard holds (shards end at 128 Ki characters): 5 shards, each two batches of 16 and 14
TOKENS = 256  # the page cap: a batch of 16 such texts takes ~2 s on 2 cores
MODEL = "builtin:seed"
QUERY = {"model": MODEL}
TOL = 1e-6
WORDS = ("the river runs past an old stone mill where every morning a grey heron waits by the weir for fish while "
         "children walk to school along the bank and the baker opens his shop before the church bells ring seven "
         "times over quiet roofs of red tile").split()


def long_texts(n: int) -> list[str]:
    """``n`` different texts of 4,400 characters each (a shard ends at its 30th: 30 × 4,400 ≥ 128 Ki)."""
    rnd = random.Random(36)
    return [(f"Text {i}: " + " ".join(rnd.choice(WORDS) for _ in range(900)))[:4399] + "." for i in range(n)]


@pytest.fixture
def served(tmp_path):
    """A server (not public) that may read corpus files from one folder and keeps its shards in another."""
    folder, work = tmp_path / "corpora", tmp_path / "work"
    folder.mkdir()
    (folder / "long.txt").write_text("\n".join(long_texts(N_TEXTS)) + "\n")
    proc, url = start_server({"ATTNVIZ_PUBLIC": "0", "ATTNVIZ_CORPUS_DIR": str(folder),
                              "ATTNVIZ_CORPUS_WORK": str(work), "ATTNVIZ_PAGE_TOKENS": str(TOKENS)})
    yield proc, url, folder / "long.txt", work
    proc.terminate()
    proc.wait(timeout=30)


def corpus_tab(url: str, tabs: ExitStack) -> tuple[Tab, list]:
    """A tab on the Corpus page with "long.txt" chosen and every text asked for; -> (tab, those widget states)."""
    tab = Tab(url, tabs)
    tab.open("Corpus", QUERY)
    source = WidgetState(id=tab.ids["corpus_source"], string_value="A file on the server")
    tab.open("Corpus", QUERY, [source])  # the path box shows only once "a file on the server" is chosen
    chosen = [source, WidgetState(id=tab.ids["corpus_path"], string_value="long.txt")]
    tab.open("Corpus", QUERY, chosen)
    inputs = [*chosen, WidgetState(id=tab.ids["corpus_limit"], int_value=N_TEXTS)]
    shown = tab.open("Corpus", QUERY, inputs)
    assert not shown["trouble"], shown["trouble"]
    return tab, inputs


def run(tab: Tab, inputs: list) -> None:
    tab.send("Corpus", QUERY, [*inputs, WidgetState(id=tab.ids["corpus_run"], trigger_value=True)])


def finished_shards(work) -> dict[str, tuple[int, int, str]]:
    """Each finished shard's name -> (mtime in ns, bytes, sha256) (a shard's write is renamed into place whole)."""
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(work.glob("*.shards/shard-*.npz"))}


def into_the_second_shard(tab: Tab, work, timeout: float = 120) -> None:
    """Read the tab's messages (as a browser would) until the job has finished shard 0 and begun shard 1's first
    batch: the bar says "30 of 150" twice, once as shard 0 is done and once before that batch."""
    said = f' {SHARD} of {N_TEXTS} texts'  # after the bar's title, then the time left
    seen = 0
    while seen < 2:
        seen += said in tab.read_until(lambda s: s.startswith("progress"), timeout=timeout)
    assert list(finished_shards(work)) == ["shard-00000.npz"]


def idle(pid: int, timeout: float = 60) -> float:
    """Wait until the server uses under 0.1 CPU-s per 0.5 s; -> the seconds that took."""
    start = time.monotonic()
    last = cpu_seconds(pid)
    while True:
        time.sleep(0.5)
        now = cpu_seconds(pid)
        if now - last < 0.1:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, "the server kept working"
        last = now


def test_a_closed_tab_stops_its_corpus_job_within_a_batch_and_a_new_tab_resumes_it(served):
    proc, url, path, work = served
    with ExitStack() as tabs:
        first, inputs = corpus_tab(url, tabs)
        started = cpu_seconds(proc.pid)
        run(first, inputs)
        into_the_second_shard(first, work)
        busy = cpu_seconds(proc.pid) - started
        kept = finished_shards(work)
        first.close()  # mid-shard: the job stops before shard 1's second batch
        closed = cpu_seconds(proc.pid)
        took = idle(proc.pid)
        after_close = cpu_seconds(proc.pid) - closed
        idle_from = cpu_seconds(proc.pid)
        time.sleep(3)
        still = cpu_seconds(proc.pid) - idle_from
        print(f"\nserver CPU: {busy:.1f} s up to shard 1's first batch, {after_close:.2f} s from the close to idle "
              f"({took:.1f} s), then {still / 3:.3f} s/s for 3 s")
        assert busy > 1.0, busy  # the measurement sees the job
        assert still < 0.3, still  # nothing runs once the tab is gone
        assert finished_shards(work) == kept  # the finished shard untouched, and no other one finished
        assert not list(work.glob("*.shards/.*.tmp"))

        second, inputs = corpus_tab(url, tabs)  # the same path, column and limit: the same job
        before = second.open("Corpus", QUERY, inputs)
        assert (before["tables"][-1]["n_texts"] == SHARD).all()  # the kept shard's numbers show before Run
        run(second, inputs)
        bars = [second.read_until(lambda s: s.startswith("progress")) for _ in range(2)]  # drawn, then before a batch
        assert all(f' {SHARD} of {N_TEXTS} texts' in b for b in bars), bars  # resumed after shard 0
        shown = second.read(timeout=300)  # to the end of the run, and of the rerun that shows the results
        assert not shown["trouble"], shown["trouble"]  # no shard was damaged, none computed again
        page_table = shown["tables"][-1]
    after = finished_shards(work)
    assert list(after) == [f"shard-{s:05d}.npz" for s in range(5)]
    assert after["shard-00000.npz"] == kept["shard-00000.npz"]  # kept as it was: not computed again

    expected = cp.run(MODEL, cp.Corpus(path, "text"), path.parent / "reference.parquet", "text", N_TEXTS,
                      max_tokens=TOKENS)
    (folder,) = work.glob("*.shards")
    got = cp.load_shards(folder, MODEL)
    assert cp.finished(folder.with_suffix(""), got)
    same(got, expected)
    assert len(page_table) == 48 and (page_table["n_texts"] == N_TEXTS).all()
    table = expected.table()
    np.testing.assert_allclose(page_table[table.columns].to_numpy(float), table.to_numpy(float), atol=TOL)
