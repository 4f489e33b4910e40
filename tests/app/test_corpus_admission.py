"""Reading a corpus is admitted by memory like other heavy work (issue 58): a Parquet file whose pages decode to tens
of MB waits in the one line while another read holds the room, and one too big for the server alone is refused in
words, with the path the visitor typed kept. Ordinary files are read at once, beside the line."""

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnviz import corpus as cp
from attnviz.corpus.read import MAX_TEXT_BYTES
from attnviz.ui import jobs
from helpers import open_page

ROWS, ROW_CHARS = 72, 1_000_000  # one data page of 72 MB once decoded: over jobs.HEAVY_READ_MB


@pytest.fixture(scope="module")
def huge_pages(tmp_path_factory):
    """A folder holding big.parquet: 72 rows of a million characters in one page (a small file: it compresses)."""
    folder = tmp_path_factory.mktemp("corpora")
    rows = [chr(ord("a") + i % 26) * ROW_CHARS for i in range(ROWS)]
    pq.write_table(pa.table({"text": rows}), folder / "big.parquet", data_page_size=2**30, compression="zstd",
                   use_dictionary=False)
    (folder / "small.csv").write_text("text\nan ordinary sentence\n")
    return folder


def test_peak_bytes_come_from_the_page_headers_and_every_pass_is_admitted(huge_pages):
    asked = []

    class Admit:  # a real context manager that records what each pass asked for and when it ended
        def __init__(self, nbytes):
            asked.append(["in", nbytes])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            asked[-1][0] = "out"

    big = cp.Corpus(huge_pages / "big.parquet", max_bytes=256 * 2**20, admit=Admit)
    assert big.largest_page >= ROWS * ROW_CHARS  # the page header's decoded size, not the file's
    assert big.peak_bytes >= ROWS * ROW_CHARS > jobs.HEAVY_READ_MB * 2**20
    assert asked == [["out", big.peak_bytes]]  # the first text's read on opening, left once read
    assert cp.count(big) == ROWS and asked[-1] == ["out", big.peak_bytes]
    small = cp.Corpus(huge_pages / "small.csv")
    assert small.peak_bytes == 2 * MAX_TEXT_BYTES <= jobs.HEAVY_READ_MB * 2**20


def page_at(folder, monkeypatch, tmp_path, **env):
    monkeypatch.setenv("ATTNVIZ_CORPUS_DIR", str(folder))
    monkeypatch.setenv("ATTNVIZ_CORPUS_WORK", str(tmp_path / "work"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    at = open_page("pages/10_Corpus.py", timeout=300)
    return at.radio(key="corpus_source").set_value("path").run()


def test_a_read_of_huge_pages_waits_while_another_read_holds_the_room(huge_pages, monkeypatch, tmp_path):
    """Room for one such read (150 MB): another session's read of the same file holds it, so this page's read is
    first in line, then goes on once that read ends. Before, both decoded at once beside the admission."""
    at = page_at(huge_pages, monkeypatch, tmp_path, ATTNVIZ_MAX_TRACE_MB="150")
    other = cp.Corpus(huge_pages / "big.parquet", max_bytes=256 * 2**20,
                      admit=lambda n: jobs.for_bytes("Another visitor's file", n))
    held, release, seen = threading.Event(), threading.Event(), []

    def other_read():  # a real pass over the file, paused after its first text
        for _ in other:
            held.set()
            release.wait(120)
            break

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not seen:
            with jobs._cond:
                if jobs._line:
                    seen.append((len(jobs._line), jobs._line[0].what, round(jobs._line[0].mb)))
            time.sleep(0.05)
        release.set()

    reader = threading.Thread(target=other_read)
    reader.start()
    try:
        assert held.wait(60) and jobs.running() == 1
        watcher = threading.Thread(target=watch)
        watcher.start()
        at = at.text_input(key="corpus_path").input("big.parquet").run(timeout=300)
        watcher.join()
    finally:
        release.set()
        reader.join()
    assert seen == [(1, "Reading this file", round(other.peak_bytes / 2**20))], seen
    assert not at.exception and not at.error, (at.exception, at.error)
    assert jobs.running() == 0 and jobs.waiting() == 0
    assert at.button(key="corpus_run")  # the file opened: Run is offered


def test_a_read_too_big_for_the_server_is_refused_in_words_and_the_path_kept(huge_pages, monkeypatch, tmp_path):
    at = page_at(huge_pages, monkeypatch, tmp_path, ATTNVIZ_MAX_TRACE_MB="50")
    at = at.text_input(key="corpus_path").input("big.parquet").run(timeout=300)
    assert not at.exception
    (error,) = at.error
    assert error.value.startswith("Reading this file would hold about ") and error.value.endswith(
        "over this server's memory for traces of 50 MB (ATTNVIZ\\_MAX\\_TRACE\\_MB). Try a smaller file."), error.value  # markdown
    assert at.text_input(key="corpus_path").value == "big.parquet"
    at = at.text_input(key="corpus_path").input("small.csv").run(timeout=300)  # an ordinary file: read at once
    assert not at.exception and not at.error, at.error
