"""attnviz.export: the .npz trace file, the CSVs and the standalone HTML, checked against the trace itself."""

import csv
import io
import json

import numpy as np
import pytest

import attnviz
from attnviz.analysis import heads
from attnviz.export import figure_html, figure_name, from_npz, head_matrix, matrix_csv, stats_csv, to_npz
from attnviz.figures.attention import attention_heatmap
from attnviz.core.tokens import labels
from attnviz.core.trace import AttentionTrace, Seq2SeqTrace
from helpers import decode

TEXT = 'She said "=1+2" <b>twice</b>, then left\x00 — naïve 😀.'


@pytest.fixture(scope="module")
def trace():
    return attnviz.trace(TEXT)


def assert_same_stack(a: AttentionTrace, b: AttentionTrace):
    assert (a.tokens, a.model, a.kind, a.text, a.truncated) == (b.tokens, b.model, b.kind, b.text, b.truncated)
    for name in ("attentions", "hidden_states", "special", "word_ids"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.norms.keys() == b.norms.keys()
    for k in a.norms:
        np.testing.assert_array_equal(a.norms[k], b.norms[k])


def test_npz_loads_without_pickle_and_round_trips(trace):
    data = to_npz(trace)
    with np.load(io.BytesIO(data), allow_pickle=False) as f:
        np.testing.assert_array_equal(f["attentions"], trace.attentions)
        np.testing.assert_array_equal(f["norms/value_norms"], trace.norms["value_norms"])
        meta = json.loads(str(f["meta"]))
    assert meta["tokens"] == list(trace.tokens) and meta["text"] == TEXT and meta["model"] == "builtin:minilm"
    assert meta["norms"] == sorted(trace.norms) and meta["kind"] == "encoder"
    assert_same_stack(from_npz(data), trace)


@pytest.fixture(scope="module")
def seq2seq():
    """A small encoder–decoder trace of random row-normalised weights (2 layers, 3 heads)."""
    rng = np.random.default_rng(0)

    def stack(T, kind):
        w = rng.random((2, 3, T, T)).astype(np.float32)
        return AttentionTrace(tokens=[f"t{i}" for i in range(T)], attentions=w / w.sum(-1, keepdims=True),
                              hidden_states=rng.random((3, T, 4)), model="m", kind=kind, text="src", truncated=1)

    cross = rng.random((2, 3, 4, 5))
    return Seq2SeqTrace(stack(5, "encoder"), stack(4, "decoder"), cross / cross.sum(-1, keepdims=True), generated=True)


def test_seq2seq_npz_round_trips(seq2seq):
    back = from_npz(to_npz(seq2seq))
    assert isinstance(back, Seq2SeqTrace) and back.generated
    assert_same_stack(back.encoder, seq2seq.encoder)
    assert_same_stack(back.decoder, seq2seq.decoder)
    np.testing.assert_array_equal(back.cross_attentions, seq2seq.cross_attentions)
    a, q, k = head_matrix(seq2seq, 1, 2, "cross")
    np.testing.assert_array_equal(a, seq2seq.cross_attentions[1, 2])
    assert (q, k) == (labels(seq2seq.decoder.tokens), labels(seq2seq.encoder.tokens))


def test_foreign_npz_is_refused_in_plain_words(tmp_path):
    np.savez(tmp_path / "x.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not an attnviz trace"):
        from_npz(tmp_path / "x.npz")


def test_head_csv_reads_back_as_the_head(trace):
    a, q, k = head_matrix(trace, 2, 5)
    rows = list(csv.reader(io.StringIO(matrix_csv(a, q, k))))
    assert [r[0] for r in rows[1:]] == [("'" + s if s[:1] == "=" and len(s) > 1 else s) for s in q]
    np.testing.assert_allclose(np.array([r[1:] for r in rows[1:]], float), trace.attentions[2, 5], rtol=1e-5)
    mean, _, _ = head_matrix(trace, 2, None)
    np.testing.assert_allclose(mean, trace.attentions[2].mean(0), rtol=1e-6)
    with pytest.raises(ValueError, match=r"layer 6 is out of range for builtin:minilm \(0–5\)"):
        head_matrix(trace, 6, 0)


def test_csv_cells_never_start_a_spreadsheet_formula():
    text = matrix_csv(np.eye(3), ["=cmd|x", "+1", "-"], ["@sum", "a", "b"])
    cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
    assert "'=cmd|x" in cells and "'+1" in cells and "'@sum" in cells and "-" in cells
    assert not any(c[:1] in "=+@" for c in cells)


def test_stats_csv_holds_the_analysis_statistics(trace):
    stats = heads.head_stats(trace)
    rows = list(csv.DictReader(io.StringIO(stats_csv(trace))))
    assert len(rows) == trace.n_layers * trace.n_heads
    r = rows[3 * trace.n_heads + 7]
    assert (r["stack"], r["layer"], r["head"]) == ("encoder", "3", "7")
    for name in heads.HEAD_STATS:
        assert float(r[name]) == pytest.approx(stats[name][3, 7], rel=1e-5, abs=1e-9), name


def test_stats_csv_of_an_encoder_decoder_has_cross_rows(seq2seq):
    rows = list(csv.DictReader(io.StringIO(stats_csv(seq2seq))))
    assert [r["stack"] for r in rows] == ["encoder"] * 6 + ["decoder"] * 6 + ["cross"] * 6
    cross = rows[-1]  # layer 1, head 2
    assert float(cross["max"]) == pytest.approx(seq2seq.cross_attentions[1, 2].max(-1).mean(), rel=1e-5)
    assert cross["distance"] == cross["prev"] == ""


def _plotly_data(page: str) -> list:
    """The data array passed to Plotly.newPlot in a page written by plotly.io.to_html."""
    start = page.index("[", page.index("Plotly.newPlot("))
    return json.JSONDecoder().raw_decode(page[start:])[0]


def test_figure_html_is_standalone_and_holds_the_data(trace):
    names = labels(trace.tokens)
    fig = attention_heatmap(trace.attentions[1, 4], names, names, "layer 1, head 4")
    page = figure_html(fig)
    assert len(page) > 3_000_000 and 'src="https://cdn.plot.ly' not in page  # plotly.js inlined: works offline
    heat = _plotly_data(page)[0]
    np.testing.assert_allclose(decode(heat["z"]), trace.attentions[1, 4], atol=1e-7)
    assert heat["x"] == [s.replace("<", "&lt;").replace(">", "&gt;") for s in heat["x"]]  # escaped
    assert "<b>twice" not in page
    small = figure_html(fig, offline=False)
    assert len(small) < 200_000 and 'src="https://cdn.plot.ly' in small


def test_file_names_are_plain():
    assert figure_name("builtin:minilm", 3, 7) == "attnviz_builtin-minilm_L3_H7"
    assert figure_name("hf:org/My Model", 0, None, "cross") == "attnviz_hf-org-My-Model_cross_L0_Hmean"
