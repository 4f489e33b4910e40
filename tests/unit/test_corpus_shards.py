"""Corpus jobs that survive any crash: a shard cut short, emptied, deleted, swapped for another, a damaged job.json,
a CLI killed with SIGKILL in the middle of a shard's write. Every rerun finishes, says which shard it computed again,
and equals an uninterrupted run within 1e-6. Jobs also stop at any batch and bound their shards by characters."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from attnviz import corpus as cp
from attnviz.cli import main
from attnviz.data import CORPUS
from conftest import ROOT

TOL = 1e-6
KW = dict(limit=14, shard_texts=4, batch_texts=2)  # shards 0-3: texts 0-3, 4-7, 8-11, 12-13


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run: its statistics and its finished shard folder, for each case to copy."""
    out = tmp_path_factory.mktemp("ref") / "stats.parquet"
    return cp.run("builtin:minilm", CORPUS, out, **KW), out


def same(a: cp.CorpusStats, b: cp.CorpusStats) -> None:
    assert list(a.ids) == list(b.ids)
    np.testing.assert_array_equal(a.n_tokens, b.n_tokens)
    for name in cp.NAMES:
        np.testing.assert_allclose(a.values[name], b.values[name], atol=TOL, err_msg=name)
    np.testing.assert_allclose(a.table().drop(columns=["layer", "head"]).to_numpy(),
                               b.table().drop(columns=["layer", "head"]).to_numpy(), atol=TOL)


def shard(out, s):
    return cp.shard_dir(out) / f"shard-{s:05d}.npz"


def cut_half(out):
    p = shard(out, 1)
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def empty(out):
    shard(out, 1).write_bytes(b"")


def delete(out):
    shard(out, 1).unlink()


def swap(out):
    a, b = shard(out, 0).read_bytes(), shard(out, 1).read_bytes()
    shard(out, 0).write_bytes(b)
    shard(out, 1).write_bytes(a)


def flip_a_byte(out):
    data = bytearray(shard(out, 2).read_bytes())
    data[len(data) // 2] ^= 0x01  # the zip's own CRC finds it
    shard(out, 2).write_bytes(bytes(data))


def tamper(out):
    """A readable shard of the right job and texts whose numbers were changed: only the checksum tells."""
    with np.load(shard(out, 2)) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["entropy"] = arrays["entropy"] + 1
    np.savez(shard(out, 2), **arrays)


def damage_job(out):
    (cp.shard_dir(out) / "job.json").write_text('{"shards": {"0": ')


@pytest.mark.parametrize("damage, notes, recomputed", [
    (cut_half, ["shard 1 (texts 4–7) is cut short"], [1]),
    (empty, ["shard 1 (texts 4–7) is empty"], [1]),
    (delete, ["shard 1 (texts 4–7) is missing"], [1]),
    (swap, ["shard 0 (texts 0–3) holds texts 4–7, not 0–3", "shard 1 (texts 4–7) holds texts 0–3, not 4–7"], [0, 1]),
    (flip_a_byte, ["shard 2 (texts 8–11) cannot be read"], [2]),
    (tamper, ["shard 2 (texts 8–11) fails its checksum"], [2]),
    (damage_job, ["job.json is damaged: starting the job afresh"], [0, 1, 2, 3]),
])
def test_a_damaged_job_is_recomputed_where_needed_and_equals_an_uninterrupted_run(reference, tmp_path, damage, notes,
                                                                                   recomputed):
    expected, ref_out = reference
    out = tmp_path / "stats.parquet"
    shutil.copytree(cp.shard_dir(ref_out), cp.shard_dir(out))
    assert cp.finished(out, cp.load_shards(cp.shard_dir(out), "builtin:minilm"))
    damage(out)
    try:
        stale = cp.load_shards(cp.shard_dir(out), "builtin:minilm")  # what the page shows before Run
    except ValueError:
        stale = None
    assert stale is None or not cp.finished(out, stale)  # damaged shards are left out, and the job is not done
    said, seen, totals = [], [], cp.Totals()
    got = cp.run("builtin:minilm", CORPUS, out, progress=seen.append, note=said.append, totals=totals, **KW)
    assert len(said) == len(notes) and all(line.startswith(n) for line, n in zip(said, notes)), said
    assert all(line.endswith(": computing it again") for line in said if line.startswith("shard")), said
    sizes = [4, 4, 4, 2]
    before = 14 - sum(sizes[s] for s in recomputed)
    assert seen == list(np.cumsum([before] + [sizes[s] for s in recomputed])[1:])  # only those shards ran
    same(got, expected)
    assert cp.finished(out, got)
    means = expected.table()[totals.table().columns]  # the page's running table: the kept shards plus the new ones
    np.testing.assert_allclose(totals.table().to_numpy(float), means.to_numpy(float), atol=TOL)
    record = json.loads((cp.shard_dir(out) / "job.json").read_text())
    assert record["finished"] and sorted(map(int, record["shards"])) == [0, 1, 2, 3]
    assert [(r["first"], r["n"]) for _, r in sorted(record["shards"].items())] == [(0, 4), (4, 4), (8, 4), (12, 2)]
    with np.load(shard(out, 3)) as f:  # each shard knows its job and its texts
        assert str(f["job"]) == record["job"] and list(f["ids"]) == [12, 13]
    assert not list(cp.shard_dir(out).glob(".*.tmp"))
    said.clear()
    again = cp.run("builtin:minilm", CORPUS, out, note=said.append, **KW)  # now whole: nothing to say, nothing run
    assert said == []
    same(again, expected)


def test_a_stop_at_any_batch_keeps_the_finished_shards_and_the_rerun_resumes(reference, tmp_path):
    expected, _ = reference
    out = tmp_path / "stats.parquet"
    ticks = []

    class Stop(Exception):
        pass

    def tick(done):
        ticks.append(done)
        if len(ticks) == 6:  # the second batch of shard 2: mid-shard
            raise Stop

    with pytest.raises(Stop):
        cp.run("builtin:minilm", CORPUS, out, tick=tick, **KW)
    assert ticks == [0, 2, 4, 6, 8, 10]  # one call before every batch of 2 texts, not once a shard
    assert sorted(p.name for p in cp.shard_dir(out).glob("shard-*.npz")) == ["shard-00000.npz", "shard-00001.npz"]
    seen = []
    got = cp.run("builtin:minilm", CORPUS, out, progress=seen.append, **KW)
    assert seen == [12, 14]
    same(got, expected)


def test_shards_are_bounded_by_characters_and_texts_by_the_token_limit(tmp_path):
    long = tmp_path / "long.txt"
    texts = [f"{i} " + "the river runs past the old stone mill " * (40 + 30 * (i % 3)) for i in range(7)]
    long.write_text("\n".join(texts) + "\n")
    out = tmp_path / "s.parquet"
    stats = cp.run("builtin:seed", long, out, shard_chars=4000, max_tokens=64)
    record = json.loads((cp.shard_dir(out) / "job.json").read_text())
    counts = [r["n"] for _, r in sorted(record["shards"].items(), key=lambda kv: int(kv[0]))]
    lengths = [len(t.strip()) for t in texts]
    ends = np.cumsum(counts)
    for start, stop in zip([0, *ends[:-1]], ends):  # each shard ends once it reaches 4,000 characters
        assert sum(lengths[start:stop - 1]) < 4000
    assert len(counts) > 2 and sum(counts) == 7
    assert stats.n_tokens.max() == 64  # the caller's token limit, not the model's


def _cli(out, limit, env=None):
    """The CLI in its own process, with this process's torch threads: a matrix product summed over another number of
    threads rounds differently (3.6e-5 in a text's entropy on an 8-core machine), which is not what these tests judge."""
    threads = str(torch.get_num_threads())
    return subprocess.Popen([sys.executable, "-m", "attnviz", "corpus", "--input", str(CORPUS), "--out", str(out),
                             "--limit", str(limit)], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": threads,
                                 "MKL_NUM_THREADS": threads, **(env or {})})


def test_the_cli_survives_sigkill_in_the_middle_of_a_shard_write_and_a_cut_shard(tmp_path):
    out = tmp_path / "stats.parquet"
    proc = _cli(out, 300, {"ATTNVIZ_TEST_SHARD_PAUSE": "4"})  # shards: texts 0-255, 256-299; each write pauses
    folder, deadline = cp.shard_dir(out), time.monotonic() + 600
    while time.monotonic() < deadline and not list(folder.glob(".shard-00001.npz.*.tmp")):
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    (tmp,) = folder.glob(".shard-00001.npz.*.tmp")
    os.kill(proc.pid, signal.SIGKILL)  # half of shard 1 written, paused
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and tmp.stat().st_size > 0
    assert shard(out, 0).exists() and not shard(out, 1).exists()

    rerun = _cli(out, 300)
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert "attnviz: 300 texts" in err and "attnviz: 256 texts" not in err  # shard 0 was kept, only shard 1 ran
    assert not list(folder.glob(".*.tmp"))
    expected = cp.run("builtin:minilm", CORPUS, tmp_path / "ref.parquet", limit=300)
    got = cp.load_shards(folder, "builtin:minilm")
    same(got, expected)
    np.testing.assert_allclose(pd.read_parquet(out).drop(columns=["layer", "head"]).to_numpy(),
                               expected.table().drop(columns=["layer", "head"]).to_numpy(), atol=TOL)

    data = shard(out, 0).read_bytes()
    shard(out, 0).write_bytes(data[: len(data) // 2])
    rerun = _cli(out, 300)
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert "attnviz: shard 0 (texts 0–255) is cut short" in err and "Traceback" not in err
    same(cp.load_shards(folder, "builtin:minilm"), expected)


def test_the_cli_says_a_damaged_job_json_starts_afresh(tmp_path, capsys):
    out = tmp_path / "stats.parquet"
    assert main(["corpus", "--input", str(CORPUS), "--out", str(out), "--limit", "5"]) == 0
    expected = cp.load_shards(cp.shard_dir(out), "builtin:minilm")
    (cp.shard_dir(out) / "job.json").write_bytes(b"\xff\xfe not json")
    capsys.readouterr()
    assert main(["corpus", "--input", str(CORPUS), "--out", str(out), "--limit", "5"]) == 0
    assert "attnviz: job.json is damaged: starting the job afresh" in capsys.readouterr().err
    same(cp.load_shards(cp.shard_dir(out), "builtin:minilm"), expected)
