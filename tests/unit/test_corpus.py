"""Corpus mode: per-text statistics from padded batches equal one text at a time; shards, resumption, bad files."""

import json

import numpy as np
import pandas as pd
import pytest

import attnviz
from attnviz import corpus as cp
from attnviz.analysis.heads import HEAD_STATS, head_stats
from attnviz.cli import main
from attnviz.data import CORPUS, sentences

TOL = 2e-5  # float32 forwards of a padded batch against one text: ~3e-6 seen
MIXED = [
    "Hi.",
    "The cat sat on the mat.",
    "Attention is all you need, said the paper in 2017 — and 3,500 people cited it by 2019!",
    "Antidisestablishmentarianism is a word; so is floccinaucinihilipilification.",
    *sentences(8, seed=3),
]


def reference(text, model="builtin:minilm", backend=None):
    """A text's statistics one at a time, from the library's own trace and head_stats."""
    t = attnviz.trace(text, model) if backend is None else backend.trace(text)
    return t, head_stats(t, cp.categories(t.tokens, t.special, t.word_ids))


def test_padded_batch_equals_one_text_at_a_time_minilm():
    backend = attnviz.load("builtin:minilm")
    got = cp.text_stats(backend, MIXED, batch_texts=6)
    lengths = got["n_tokens"]
    assert lengths.min() < 10 and lengths.max() > 25  # the batches really are padded
    for i, text in enumerate(MIXED):
        t, ref = reference(text)
        assert got["n_tokens"][i] == t.n_tokens
        plain = head_stats(t)  # the Analysis page's numbers, unchanged by the extra shares
        for name in HEAD_STATS:
            np.testing.assert_allclose(ref[name], plain[name], atol=1e-12)
        for name in cp.NAMES:
            np.testing.assert_allclose(got[name][i], ref[name], atol=TOL, err_msg=f"{name} of text {i}")


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_padded_batch_equals_one_text_at_a_time_hf(tiny_backend, family):
    backend = tiny_backend(family)
    assert cp.batchable(backend)
    texts = MIXED[:6]
    got = cp.text_stats(backend, texts, batch_texts=6)
    assert len(set(got["n_tokens"])) > 3
    for i, text in enumerate(texts):
        t, ref = reference(text, backend=backend)
        for name in cp.NAMES:
            np.testing.assert_allclose(got[name][i], ref[name], atol=TOL, err_msg=f"{family} {name} of text {i}")


def test_batch_recording_refuses_what_it_cannot_cut(tiny_backend):
    import torch

    from attnviz.capture.record import record

    net = attnviz.load("builtin:minilm").net
    with torch.inference_mode(), record(net) as rec, pytest.raises(ValueError, match="one text at a time"):
        net(torch.ones(2, 5, dtype=torch.long))
    with torch.inference_mode(), record(net, [5, 3]) as rec:
        net(torch.ones(2, 5, dtype=torch.long), torch.tensor([[1] * 5, [1, 1, 1, 0, 0]]))
        assert rec.weights(item=1).shape == (6, 12, 3, 3)
        with pytest.raises(ValueError, match="no norm statistics"):
            rec.norms()


def test_categories_of_known_tokens():
    t = attnviz.trace("The 42 cats, unbelievably, ran.")
    c = cp.categories(t.tokens, t.special, t.word_ids)
    tokens = list(t.tokens)
    picked = {name: [tokens[i] for i in np.flatnonzero(m)] for name, m in c.items()}
    assert picked["special"] == ["[CLS]", "[SEP]"]
    assert picked["punctuation"] == [",", ",", "."]
    assert picked["stop_word"] == ["the"]
    assert picked["number"] == ["42"]
    assert picked["word_piece"] and all(p.startswith("##") for p in picked["word_piece"])


def test_run_equals_mean_of_per_text_statistics_and_resumes(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(MIXED) + "\n", encoding="utf-8")
    out = tmp_path / "stats.parquet"
    seen = []
    stats = cp.run("builtin:minilm", path, out, shard_texts=5, batch_texts=4, progress=seen.append)
    assert seen == [5, 10, 12]
    assert list(stats.ids) == list(range(len(MIXED)))
    refs = [reference(t)[1] for t in MIXED]
    table = stats.table()
    assert table.shape[0] == 72 and (table["n_texts"] == len(MIXED)).all()
    for name in cp.NAMES:
        per_text = np.stack([r[name] for r in refs])  # (N, L, H)
        np.testing.assert_allclose(stats.values[name], per_text, atol=TOL)
        np.testing.assert_allclose(table[f"{name}_mean"], per_text.mean(0).ravel(), atol=TOL)
        np.testing.assert_allclose(table[f"{name}_p50"], np.median(per_text, 0).ravel(), atol=TOL)

    shards = sorted(cp.shard_dir(out).glob("shard-*.npz"))
    assert len(shards) == 3
    before = {p.name: p.stat().st_mtime_ns for p in shards}
    shards[1].unlink()  # as if the job had stopped during the second shard
    seen.clear()
    again = cp.run("builtin:minilm", path, out, shard_texts=5, batch_texts=4, progress=seen.append)
    assert seen == [12]  # 7 texts were already done; only the missing shard ran
    assert {p.name: p.stat().st_mtime_ns for p in sorted(cp.shard_dir(out).glob("shard-*.npz"))
            if p.name != shards[1].name} == {k: v for k, v in before.items() if k != shards[1].name}
    for name in cp.NAMES:
        np.testing.assert_allclose(again.values[name], stats.values[name], atol=1e-7)
    seen.clear()
    cp.run("builtin:minilm", path, out, shard_texts=5, batch_texts=4, limit=6, progress=seen.append)
    assert seen == [5, 6]  # another job (a limit): the old shards are not reused


def test_top_texts_are_the_extremes(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(MIXED), encoding="utf-8")
    stats = cp.run("builtin:minilm", path, tmp_path / "s.csv", shard_texts=50)
    paths = cp.write(stats, tmp_path / "s.csv", cp.Corpus(path), by="entropy", k=2)
    top = pd.read_csv(paths[1])
    v = stats.values["entropy"][:, 3, 7]
    rows = top[(top.layer == 3) & (top["head"] == 7)]
    most = rows[rows.end == "most"].sort_values("rank")
    least = rows[rows.end == "least"].sort_values("rank")
    assert list(most.text_id) == list(np.argsort(v)[::-1][:2])
    assert list(least.text_id) == list(np.argsort(v)[:2])
    assert list(most.text) == [MIXED[i] for i in most.text_id]
    np.testing.assert_allclose(most.value, np.sort(v)[::-1][:2], rtol=1e-6)
    table = pd.read_csv(paths[0])
    assert {"layer", "head", "entropy_mean", "entropy_p10", "entropy_p90", "stop_word_mean"} <= set(table.columns)


def test_every_format_reads_the_same_texts(tmp_path):
    texts = ["First text, with a comma.", 'Second "quoted" text', "Third\ttext"]
    (tmp_path / "a.txt").write_text("\n".join(texts) + "\n\n", encoding="utf-8")
    (tmp_path / "p.txt").write_text("First text,\nwith a comma.\n\nSecond\n\n\nThird\n", encoding="utf-8")
    pd.DataFrame({"id": [1, 2, 3], "body": texts}).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame({"body": texts}).to_parquet(tmp_path / "a.parquet")
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"body": t, "n": 1}) for t in texts), encoding="utf-8")
    assert list(cp.Corpus(tmp_path / "a.txt")) == texts
    assert list(cp.Corpus(tmp_path / "p.txt")) == ["First text,\nwith a comma.", "Second", "Third"]
    for ext in ("csv", "parquet", "jsonl"):
        assert list(cp.Corpus(tmp_path / f"a.{ext}", "body")) == texts
    assert len(list(cp.Corpus(CORPUS))) == 400


@pytest.mark.parametrize("name, content, column, message", [
    ("empty.txt", b"", None, "is empty"),
    ("blank.txt", b"\n  \n\t\n", None, "has no texts"),
    ("binary.txt", bytes(range(256)) * 4, None, "looks binary"),
    ("latin1.csv", "text\ncaf\xe9 au lait\n".encode("latin-1"), "text", "not UTF-8"),
    ("huge.txt", b"short line\n" + b"x" * (cp.MAX_TEXT_CHARS + 10) + b"\n", None, "line 2 is longer than"),
    ("huge.csv", b"text\n" + b"y" * (cp.MAX_TEXT_CHARS + 10) + b"\n", "text", "characters"),
    ("cols.csv", b"body,label\nhello,1\n", "text", "no column 'text'; its columns: body, label"),
    ("cols.jsonl", b'{"body": "hello"}\n', "text", "no column 'text'; its columns: body"),
    ("bad.jsonl", b'{"text": "hello"}\nnot json\n', "text", "line 2 is not JSON"),
    ("notparquet.parquet", b"PAR1 this is not parquet", "text", "not a Parquet file"),
    ("table.xlsx", b"PK\x03\x04", None, "a corpus must be"),
])
def test_bad_files_get_a_clear_message(tmp_path, name, content, column, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        list(cp.Corpus(path, column))


def test_parquet_wrong_column(tmp_path):
    pd.DataFrame({"body": ["a b c"]}).to_parquet(tmp_path / "a.parquet")
    with pytest.raises(ValueError, match="no column 'text'; its columns: body"):
        cp.Corpus(tmp_path / "a.parquet")


def test_cli_corpus(tmp_path, capsys):
    out = tmp_path / "stats.parquet"
    assert main(["corpus", "--model", "builtin:minilm", "--input", str(CORPUS), "--out", str(out), "--limit", "6"]) == 0
    table = pd.read_parquet(out)
    assert table.shape[0] == 72 and (table["n_texts"] == 6).all()
    top = pd.read_parquet(tmp_path / "stats.top.parquet")
    assert set(top.text) <= set(sentences(6))
    assert "6 texts" in capsys.readouterr().err

    assert main(["corpus", "--input", str(tmp_path / "missing.txt"), "--out", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "c.csv").write_text("body\nhello\n")
    assert main(["corpus", "--input", str(tmp_path / "c.csv"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no column 'text'" in err
    assert main(["corpus", "--input", str(CORPUS), "--out", str(tmp_path / "x.json")]) == 2
    assert main(["corpus", "--input", str(CORPUS), "--out", str(out), "--model", "nope"]) == 2


@pytest.mark.parametrize("values, kind", [
    ([["a", "b"], ["c"]], "list<element: string>"),
    ([{"body": "a"}, {"body": "b"}], "struct<body: string>"),
    ([1, 2], "int64"),
])
def test_a_parquet_column_that_does_not_hold_text_is_refused_by_name_and_type(tmp_path, values, kind, capsys):
    path = tmp_path / "nested.parquet"
    pd.DataFrame({"text": values}).to_parquet(path)
    with pytest.raises(ValueError, match=rf"^nested.parquet: its column 'text' holds {kind}, not text$"):
        list(cp.Corpus(path))
    out = tmp_path / "stats.parquet"
    assert main(["corpus", "--input", str(path), "--out", str(out)]) == 2  # the CLI says the same in one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"holds {kind}, not text" in err


def test_a_categorical_parquet_column_reads_as_its_texts(tmp_path):
    texts = ["one text", "another text", "one text"]
    pd.DataFrame({"text": pd.Categorical(texts)}).to_parquet(tmp_path / "c.parquet")
    assert list(cp.Corpus(tmp_path / "c.parquet")) == texts


def test_a_bad_byte_past_the_checked_start_is_named_with_the_file(tmp_path, capsys):
    path = tmp_path / "late.csv"
    path.write_bytes(b"text\n" + b"a fine line of text\n" * 5000 + b"caf\xe9\n")  # past the first 64 KB
    with pytest.raises(ValueError, match=r"^late.csv is not UTF-8 text \(byte 100,008: invalid continuation byte\)$"):
        list(cp.Corpus(path))
    assert main(["corpus", "--input", str(path), "--out", str(tmp_path / "s.parquet")]) == 2
    assert "late.csv is not UTF-8 text" in capsys.readouterr().err
