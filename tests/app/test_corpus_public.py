"""The Corpus page facing strangers: no visitor-chosen cluster or path, files read within a budget before they
expand, uploads refused before they are buffered, kept only while their session needs them, 0600 in a 0700 folder
that stays under ATTNVIZ_CORPUS_DISK_MB."""

import http.client
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from attnviz import corpus as cp
from attnviz.ui import collect
from conftest import ROOT, start_server
from helpers import Tab

PAGE = "pages/10_Corpus.py"


@pytest.fixture
def public(monkeypatch, tmp_path):
    for name in ("SPACE_ID", "ATTNVIZ_MODELS", "ATTNVIZ_RAY_ADDRESS", "ATTNVIZ_CORPUS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ATTNVIZ_PUBLIC", "1")
    monkeypatch.setenv("ATTNVIZ_CORPUS_WORK", str(tmp_path / "work"))
    return monkeypatch


def page() -> AppTest:
    at = AppTest.from_file("../../app.py", default_timeout=300)
    at.switch_page(PAGE)
    return at


def ok(at):
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return at


def upload(at, name: str, data: bytes) -> AppTest:
    at.radio(key="corpus_source").set_value("upload").run()
    at.file_uploader(key="corpus_upload").set_value((name, data, "application/octet-stream"))
    return at.run()


def bomb(path: Path, chars: int = 1_000_000, rows: int = 1000) -> Path:
    """A Parquet file of well under 1 KB whose rows are each ``chars`` characters once read."""
    pq.write_table(pa.table({"text": pa.array(["ab" * (chars // 2)] * rows)}), path, compression="zstd",
                   compression_level=22)
    return path


def children() -> set[int]:
    """This process's child processes (a Ray started here would add its gcs_server, raylet and workers)."""
    me, found = str(os.getpid()), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            found.add(int(stat.parent.name))
    return found


def test_a_crafted_ray_address_or_path_is_ignored_and_nothing_starts(public, tmp_path):
    public.setenv("ATTNVIZ_CORPUS_DIR", "/")  # even an operator's folder is not offered in public mode
    at = page()
    at.session_state["corpus_ray"] = "127.0.0.1:9"
    at.session_state["corpus_source"] = "path"
    at.session_state["corpus_path"] = "etc/passwd"
    at.query_params["corpus_ray"] = "auto"
    before = children()
    at = ok(at.run())
    assert at.radio(key="corpus_source").options == ["Demo: 400 generated sentences", "Upload a file"]
    assert at.radio(key="corpus_source").value == "demo"
    assert not [t for t in at.text_input if t.key in ("corpus_ray", "corpus_path")]
    at.number_input(key="corpus_limit").set_value(3)
    at = ok(at.button(key="corpus_run").click().run())
    assert (at.dataframe[0].value["n_texts"] == 3).all()  # the demo corpus, run here
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
    assert children() <= before


def test_a_parquet_bomb_opened_by_three_sessions_adds_under_100_mb(tmp_path):
    """In a fresh process: RSS after the page and model are loaded, then three sessions open the bomb, one runs it."""
    path = bomb(tmp_path / "b.parquet")
    assert path.stat().st_size < 1024
    script = textwrap.dedent(f"""
        import json, resource
        from streamlit.testing.v1 import AppTest
        def rss():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        data = open({str(path)!r}, "rb").read()
        def session():
            at = AppTest.from_file({str(ROOT / 'app.py')!r}, default_timeout=300)
            at.switch_page("pages/10_Corpus.py")
            return at.run()
        warm = session()
        warm.number_input(key="corpus_limit").set_value(2)
        warm.button(key="corpus_run").click().run()  # the model, the page and a run's code paths loaded
        base, base_peak = rss(), peak()
        sessions = []
        for i in range(3):
            at = session()
            at.radio(key="corpus_source").set_value("upload").run()
            at.file_uploader(key="corpus_upload").set_value(("visitor.parquet", data, "application/octet-stream"))
            at.run()
            assert not at.exception and not at.error, [e.value for e in at.error]
            sessions.append(at)
        opened, opened_peak = rss(), peak()
        at = sessions[0]
        at.number_input(key="corpus_limit").set_value(100)
        at.button(key="corpus_run").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        table = at.dataframe[0].value
        print(json.dumps({{"base": base, "opened": opened - base, "opened_peak": opened_peak - base_peak,
                          "run": rss() - base, "run_peak": peak() - base_peak, "texts": int(table["n_texts"][0])}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATTNVIZ_PUBLIC": "1", "ATTNVIZ_CORPUS_WORK": str(tmp_path / "w")}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT / "tests", env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print(got)
    assert got["texts"] == 100
    assert got["opened"] < 100 and got["opened_peak"] < 100, got
    assert got["run"] < 100 and got["run_peak"] < 100, got


def test_a_row_over_the_limit_is_refused_by_the_visitors_file_name(public, tmp_path):
    data = bomb(tmp_path / "b.parquet", chars=cp.MAX_TEXT_CHARS + 200_000).read_bytes()
    at = upload(page().run(), "my reviews.parquet", data)
    (error,) = at.error
    assert error.value == "my reviews.parquet: row 1 holds 1,200,000 characters, over the 1,000,000 one text may have"
    assert cp.digest(data) not in error.value and not at.exception
    at = upload(at, "notes.csv", b"body\nhello\n")
    assert at.error[0].value == "notes.csv has no column 'text'; its columns: body"


def test_the_metadata_refuses_a_file_before_reading_it(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": [f"text number {i} " * 50 for i in range(2000)]}), path)
    declared = pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size
    with pytest.raises(ValueError, match=r"^upload.parquet: its column 'text' holds 2 MB uncompressed, over the 1 MB"):
        cp.Corpus(path, name="upload.parquet", max_bytes=1_000_000)
    assert declared > 1_000_000
    assert len(list(cp.Corpus(path, max_bytes=4_000_000))) == 2000


def work_state(work: Path) -> tuple[int, set]:
    files = [p for p in work.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), {oct(p.stat().st_mode & 0o777) for p in files}


def test_uploads_and_shards_stay_under_the_budget_0600_and_go_with_their_session(public, tmp_path):
    public.setenv("ATTNVIZ_CORPUS_DISK_MB", "0.5")
    budget = 0.5 * 2**20
    work = tmp_path / "work"
    at = page().run()
    for i in range(20):
        body = "\n".join(f"upload {i} line {k}: the quiet river passes the mill at dawn" for k in range(2000))
        at = ok(upload(at, f"u{i}.txt", body.encode()))  # ~120 KB each
        assert len(list(work.glob("*.txt"))) == 1  # this session's upload, the one before it gone
        at.number_input(key="corpus_limit").set_value(10)
        at = ok(at.button(key="corpus_run").click().run())
        assert (at.dataframe[0].value["n_texts"] == 10).all()
        used, modes = work_state(work)
        assert used <= budget and modes == {"0o600"}, (i, used, modes)
        assert oct(work.stat().st_mode & 0o777) == "0o700"
        assert not list(work.glob("*.txt"))  # the job finished: its upload is no longer on disk
        top = [m.value for m in at.markdown if m.value.startswith("**")]
        assert len(top) == 10 and all(f"upload {i} line" in m for m in top)  # its top texts are kept
    jobs = list(work.glob("*.shards"))
    assert 2 <= len(jobs) < 20  # the oldest finished jobs went first

    at = upload(at, "last.txt", b"one text\nanother text\n")
    (held,) = work.glob("*.txt")
    assert oct(held.stat().st_mode & 0o777) == "0o600"
    del at
    collect.sweep()  # the server's collector does this every minute; the first session's state was frozen with it
    assert not held.exists()  # its session ended


def test_an_upload_over_the_limit_is_refused_before_it_is_buffered(tmp_path):
    """A real server: Streamlit's upload endpoint answers 413 from the Content-Length, with 1 KB of 17 MB sent."""
    proc, url = start_server({"ATTNVIZ_PUBLIC": "1", "ATTNVIZ_CORPUS_WORK": str(tmp_path / "work")})
    try:
        with urllib.request.urlopen(url + "/_stcore/health") as r:  # where Streamlit sets its XSRF cookie
            cookie = next(c.split(";")[0] for c in r.headers.get_all("Set-Cookie") if c.startswith("_streamlit_xsrf="))
        with Tab(url, max_size=2**26) as tab:
            tab.open(timeout=120)  # a session, for the upload endpoint to take a file into
            session = tab.session_id
            host = url.split("//")[1]
            headers = {"X-Xsrftoken": cookie.split("=", 1)[1], "Cookie": cookie}

            def put(body_len: int, sent: bytes) -> tuple[int, float]:
                conn = http.client.HTTPConnection(host, timeout=60)
                boundary = "attnvizboundary"
                conn.putrequest("PUT", f"/_stcore/upload_file/{session}/file1")
                for k, v in {**headers, "Content-Type": f"multipart/form-data; boundary={boundary}",
                             "Content-Length": str(body_len)}.items():
                    conn.putheader(k, v)
                conn.endheaders()
                start = time.monotonic()
                conn.send(sent)
                status = conn.getresponse().status
                conn.close()
                return status, time.monotonic() - start

            small = (f"--attnvizboundary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
                     f"Content-Type: text/plain\r\n\r\nhello\r\n--attnvizboundary--\r\n").encode()
            assert put(len(small), small)[0] in (200, 204)  # the session and token are good: only size refuses
            status, took = put(17 * 2**20, small + b"x" * 1024)  # 17 MB announced, 1 KB sent
            assert status == 413 and took < 30
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_refused_run_removes_nothing_and_a_run_that_fits_removes_only_the_least_recently_used(public, tmp_path):
    """Visitor A's finished results survive visitor B's run that cannot fit (the probe's 1,000,000-row CSV, scaled
    to a 4.5 MB budget); a run that fits removes the least recently used job, not the one a visitor just looked at."""
    public.setenv("ATTNVIZ_CORPUS_DISK_MB", "4.5")
    work = tmp_path / "work"
    jobs = []
    for i in range(3):  # three visitors' finished runs, ~1.2 MB each
        at = page().run()
        body = "\n".join(f"visitor {i} line {k}: the quiet river passes the mill at dawn" for k in range(2000))
        at = ok(upload(at, f"v{i}.txt", body.encode()))
        at.number_input(key="corpus_limit").set_value(300)
        at = ok(at.button(key="corpus_run").click().run())
        jobs.append(next(p for p in work.glob("*.shards") if p not in jobs))
        del at  # the visitor leaves: nobody holds these results any more
        collect.sweep()
        time.sleep(0.05)  # distinct folder times for the least-recently-used order
    before = {p: sorted(f.name for f in p.iterdir()) for p in jobs}

    big = page().run()
    rows = "text\n" + "\n".join(f"r{k}" for k in range(60_000))  # ~400 KB: the upload itself fits
    big = upload(big, "big.csv", rows.encode())
    big.number_input(key="corpus_limit").set_value(1_000_000)
    big = big.button(key="corpus_run").click().run()
    assert [e.value for e in big.error] and "space for corpus runs is full" in big.error[0].value
    assert {p: sorted(f.name for f in p.iterdir()) for p in jobs if p.exists()} == before  # nothing removed

    os.utime(jobs[0])  # visitor 0 came back to look at theirs: now the most recently used
    small = page().run()
    body = "\n".join(f"a fourth visitor, line {k}, reads about the mill" for k in range(2000))
    small = ok(upload(small, "v3.txt", body.encode()))
    small.number_input(key="corpus_limit").set_value(300)
    small = ok(small.button(key="corpus_run").click().run())
    assert jobs[0].exists() and jobs[2].exists() and not jobs[1].exists()  # only the least recently used went
    assert work_state(work)[0] <= 4.5 * 2**20


def lie_about_size(path: Path, declared: int = 1000) -> Path:
    """Edit the Parquet footer so that the column chunk claims ``declared`` bytes uncompressed (the probe's edit): the
    value's zigzag varint is replaced by a padded varint of the same length, which Thrift reads as ``declared``."""
    data = bytearray(path.read_bytes())
    meta = pq.ParquetFile(path).metadata.row_group(0).column(0)

    def varint(n: int, width: int | None = None) -> bytes:
        out = []
        while True:
            out.append(n & 0x7F)
            n >>= 7
            if not n and (width is None or len(out) >= width):
                break
        return bytes(b | 0x80 for b in out[:-1]) + bytes(out[-1:])

    true = varint(meta.total_uncompressed_size * 2)  # zigzag of a positive i64
    length = int.from_bytes(data[-8:-4], "little")
    footer = bytes(data[-8 - length:-8])
    assert footer.count(true) >= 1
    at = len(data) - 8 - length + footer.index(true)
    data[at:at + len(true)] = varint(declared * 2, len(true))
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size == declared
    return path


@pytest.mark.parametrize("pages, message", [
    ("a page a row", "visitor.parquet holds more than 50 MB of text by row 101, the most taken here"),
    ("one page", "visitor.parquet: a page of its column 'text' decodes to 300 MB, over the 50 MB taken here"),
])
def test_a_parquet_file_that_understates_its_size_is_refused_within_the_budget(tmp_path, pages, message):
    """The probe's file, scaled: 600 rows of ~0.5 MB whose footer declares 1,000 bytes. Read with a 50 MB budget in a
    fresh process, it is refused by row 101 (or, written as one page, by its page's own header) while the reader's
    peak memory grows by a few rows, not by the 300 MB it holds."""
    path = tmp_path / "liar.parquet"
    pq.write_table(pa.table({"text": [("x" * 499_990) + f"{i:010d}" for i in range(600)]}), path,
                   compression="zstd", use_dictionary=False, write_batch_size=1 if pages == "a page a row" else 1024)
    lie_about_size(path)
    assert path.stat().st_size < 2_000_000
    script = textwrap.dedent(f"""
        import json, resource
        import pyarrow, pyarrow.compute, pyarrow.parquet
        from attnviz import corpus as cp
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        try:
            for _ in cp.Corpus({str(path)!r}, name="visitor.parquet", max_bytes=50_000_000):
                pass
            message = None
        except ValueError as e:
            message = str(e)
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
        print(json.dumps({{"message": message, "grew": grew}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["message"] == message, got
    assert got["grew"] < 60, got  # MB; 300 MB decoded at once before reads were sized by decoded rows and pages
