"""The long-context head atlas: each score against a from-scratch reference on constructed attention, the atlas
through a tiny long-context Llama and the seed model, and the knock-out check."""

import json

import numpy as np
import pytest

from attnviz import AttentionTrace
from attnviz.analysis import atlas
from attnviz.analysis.atlas import (BLOCK, PATTERNS, SINK, WINDOW, a_shape_kept, block_sparse_kept, masks,
                                    mass_scores, null_hi, pattern_of, retrieval_hits, score_trace, vertical_slash_choice,
                                    vertical_slash_kept)

T = 1024


def rows_of(head, positions):
    """(1, n, T) the rows ``positions`` of a (T, T) head."""
    return head[None, positions]


def causal_uniform(n=T):
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def normalised(a):
    a = np.tril(a)
    return a / a.sum(-1, keepdims=True)


def streaming_head(n=T, rng=None):
    """Random weights on the first SINK keys and the WINDOW most recent ones only."""
    rng = rng or np.random.default_rng(1)
    i, j = np.indices((n, n))
    return normalised(rng.random((n, n)) * ((j < SINK) | ((j <= i) & (j > i - WINDOW))))


def test_a_head_that_copies_the_needle_scores_one_and_a_head_that_never_looks_there_zero():
    tokens = ["<s>", *[f"w{i}" for i in range(40)], "5", "1", "9", "9", "2", ".", *[f"v{i}" for i in range(20)],
              "?", "5", "1", "9", "9", "2"]
    needle = (41, 46)
    q0 = len(tokens) - 6  # the query "?" generates the first "5", then the next query the "1", …
    generated = tokens[q0 + 1:]
    copier = np.array([41, 42, 43, 44, 45])  # at step s it attends to the needle token it outputs next
    wrong_token = np.array([42, 41, 41, 41, 41])  # in the needle, never on the token it outputs
    elsewhere = np.array([3, 4, 5, 6, 7])
    repeated = np.array([41, 42, 43, 43, 45])  # the second "9" hit twice at position 43: counted once
    top = np.stack([copier, wrong_token, elsewhere, repeated])  # (H, S)
    hits = retrieval_hits(top, tokens, generated, needle)

    def reference(steps):  # Wu et al.: |{needle tokens copied}| / |needle|
        copied = {int(at) for s, at in enumerate(steps) if needle[0] <= at < needle[1] and tokens[at] == generated[s]}
        return len(copied) / (needle[1] - needle[0])

    assert hits.mean(-1).tolist() == [reference(s) for s in top] == [1.0, 0.0, 0.0, 0.8]


def test_retrieval_read_from_a_trace_a_layer_at_a_time():
    """score_trace's hits: the steps' rows argmax through Weights.tile, equal to the dense array's argmax."""
    rng = np.random.default_rng(0)
    n = 80
    tokens = [f"t{i % 23}" for i in range(n - 6)] + ["7", "3", "1", "7", "3", "1"]
    needle = (30, 33)
    tokens[30:33] = ["7", "3", "1"]
    a = rng.random((1, 2, n, n)) * np.tril(np.ones((n, n)))
    q0 = n - 7  # queries 73.. generate tokens 74..79
    for s in range(3):  # head 0 points at the needle token that comes next
        a[0, 0, q0 + s, 30 + s] = 100.0
    a /= a.sum(-1, keepdims=True)
    trace = AttentionTrace(tokens, attentions=a.astype(np.float32), kind="decoder")
    hits = score_trace(trace, atlas._Scores(1), rng, True, block=16, steps=(q0, 6), needle=needle)
    top = a[0, :, q0:q0 + 6].argmax(-1)
    np.testing.assert_array_equal(hits[0], retrieval_hits(top, tokens, tokens[q0 + 1:], needle))
    assert hits[0, 0].all()


def test_a_head_restricted_to_sink_and_window_loses_nothing_when_streamed():
    positions = np.arange(300, T, 37)
    rng = np.random.default_rng(0)
    w = np.concatenate([rows_of(streaming_head(), positions), rows_of(causal_uniform(), positions)])  # (2, n, T)
    got = mass_scores(w, masks(positions, T, True, rng, 128))
    np.testing.assert_allclose(got["streaming"][0], 0.0, atol=1e-12)
    # a uniform head keeps (SINK + WINDOW) of p + 1 keys
    np.testing.assert_allclose(got["streaming"][1], 1 - (SINK + WINDOW) / (positions + 1), atol=1e-12)
    np.testing.assert_allclose(got["sink"][1], SINK / (positions + 1), atol=1e-12)
    # the nulls keep as many keys at random places: for a uniform head the same mass as its own score
    np.testing.assert_allclose(got["streaming_null"][1], got["streaming"][1], atol=1e-12)
    np.testing.assert_allclose(got["sink_null"][1], got["sink"][1], atol=1e-12)
    # for the streaming head, random keys lose most of its mass
    assert got["streaming_null"][0].mean() > 0.8


def test_sink_and_its_null_against_a_reference_drawn_key_by_key():
    positions = np.array([200, 511, 1000])
    sinky = normalised(np.where(np.arange(T)[None, :] == 0, 1000.0, 1.0) * np.ones((T, T)))
    w = rows_of(sinky, positions)
    got = mass_scores(w, masks(positions, T, True, np.random.default_rng(5), 128))
    want = np.array([sinky[p, :SINK].sum() for p in positions])
    np.testing.assert_allclose(got["sink"][0], want, rtol=1e-12)
    # the null's keys: SINK distinct keys the query sees, drawn uniformly (the same draw, made by hand)
    draw = np.random.default_rng(5).random((len(positions), T))
    for i, p in enumerate(positions):
        keys = np.argsort(np.where(np.arange(T) <= p, draw[i], np.inf))[:SINK]
        assert keys.max() <= p and len(set(keys)) == SINK
        np.testing.assert_allclose(got["sink_null"][0, i], sinky[p, keys].sum(), rtol=1e-12)
    assert got["sink"][0].min() > 0.1 > got["sink_null"][0].max()


def test_bidirectional_windows_sit_around_the_query():
    positions = np.array([100, 500])
    i, j = np.indices((T, T))
    local = ((np.abs(i - j) <= WINDOW // 2) | (j < SINK)).astype(float)
    local /= local.sum(-1, keepdims=True)
    got = mass_scores(rows_of(local, positions), masks(positions, T, False, np.random.default_rng(0), 128))
    np.testing.assert_allclose(got["streaming"], 0.0, atol=1e-12)


def pattern_heads(rng):
    """(4, T, T) causal heads: A-shape, vertical-slash, block-sparse, uniform."""
    i, j = np.indices((T, T))
    budget = atlas.budget_of(T)
    a_shape = normalised(rng.random((T, T)) * ((j < BLOCK) | (j > i - (budget - BLOCK))))
    cols = rng.choice(T, 20, replace=False)
    vs = np.isin(j, cols) | np.isin(i - j, [0, 1, 5, 64])
    vertical = normalised(rng.random((T, T)) * vs + 1e-9)
    nb = T // BLOCK
    chosen = np.eye(nb, dtype=bool)  # per query block: its own key block and one earlier one (the budget's 2)
    chosen[np.arange(1, nb), rng.integers(0, np.arange(1, nb))] = True
    block = normalised(rng.random((T, T)) * chosen[i // BLOCK, j // BLOCK] + 1e-9)
    return np.stack([a_shape, vertical, block, causal_uniform()])


def test_each_pattern_is_found_on_a_head_built_from_its_mask():
    rng = np.random.default_rng(3)
    heads = pattern_heads(rng)
    budget = atlas.budget_of(T)
    kept = {p: [] for p in PATTERNS}
    choice = None
    for a, b in atlas.query_blocks(T):
        pos = np.arange(a, b)
        w = heads[:, a:b]
        if choice is None:
            choice = vertical_slash_choice(w, pos, budget)
        m = masks(pos, T, True, rng, budget)
        kept["a-shape"].append(a_shape_kept(w, m))
        kept["vertical-slash"].append(vertical_slash_kept(w, m.diagonal, choice))
        kept["block-sparse"].append(block_sparse_kept(w, budget))
    means = {p: np.concatenate(v, -1).mean(-1) for p, v in kept.items()}
    assert list(pattern_of(means)) == ["a-shape", "vertical-slash", "block-sparse", "dense"]
    assert means["a-shape"][0] == pytest.approx(1.0) and means["block-sparse"][2] > 0.99


def test_kept_masses_against_masks_built_by_hand():
    """A-shape, vertical-slash and block-sparse on random rows, each against its mask written out per query."""
    rng = np.random.default_rng(7)
    n, budget = 256, 64
    w = normalised(rng.random((n, n)) ** 8)[None]  # (1, n, n) peaky rows
    pos = np.arange(192, 256)
    rows = w[:, pos]
    m = masks(pos, n, True, rng, budget, block=16)
    got = a_shape_kept(rows, m)
    want = [w[0, p, [k for k in range(p + 1) if k < 16 or k > p - 48]].sum() for p in pos]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)

    cols, diags = vertical_slash_choice(rows, pos, budget)
    col_mass = rows[0].sum(0)
    assert set(cols[0]) == set(np.argsort(-col_mass, kind="stable")[:32])
    diag_mass = {}
    for r, p in enumerate(pos):
        for k in range(n):
            diag_mass[p - k] = diag_mass.get(p - k, 0.0) + rows[0, r, k]
    best = sorted(diag_mass, key=lambda d: -diag_mass[d])[:32]
    assert set(diags[0] - n) == set(best)
    got = vertical_slash_kept(rows, m.diagonal, (cols, diags))
    want = [w[0, p, [k for k in range(n) if k in set(cols[0]) or p - k in set(best)]].sum() for p in pos]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)

    got = block_sparse_kept(rows, budget, block=16)
    per_block = rows[0].reshape(64, 16, 16).sum(-1).sum(0)  # (16 key blocks,)
    keep = np.argsort(-per_block, kind="stable")[:4]
    want = [sum(w[0, p, b * 16:(b + 1) * 16].sum() for b in keep) for p in pos]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)


def test_null_hi_is_the_upper_end_of_a_bootstrap_interval():
    rng = np.random.default_rng(0)
    values = np.stack([np.full(400, 0.25), rng.random(400)])  # a constant, and uniform draws
    hi = null_hi(values, np.random.default_rng(1))
    assert hi[0] == pytest.approx(0.25)
    se = values[1].std() / np.sqrt(400)
    assert values[1].mean() + 1.5 * se < hi[1] < values[1].mean() + 2.5 * se  # ≈ mean + 1.96 standard errors


def test_score_trace_reads_the_same_rows_as_the_dense_array():
    rng = np.random.default_rng(2)
    heads = pattern_heads(rng)[None].astype(np.float32)  # (1, 4, T, T)
    trace = AttentionTrace([f"t{i}" for i in range(T)], attentions=heads, kind="decoder")
    scores = atlas._Scores(1)
    score_trace(trace, scores, np.random.default_rng(0), True)
    rows = np.concatenate([np.arange(a, b) for a, b in atlas.query_blocks(T)])
    np.testing.assert_allclose(scores.stacked("sink")[0], heads[0][:, rows, :SINK].sum(-1), rtol=1e-5)


@pytest.fixture(scope="module")
def long_llama(tmp_path_factory):
    """A tiny Llama whose rotary positions go to 16,384 (TESTING.md's long-context decoder), loaded as users do."""
    import attnviz
    from tiny_models import long_llama as key

    return attnviz.load(key(tmp_path_factory.mktemp("atlas-llama")))


COLUMNS = ["layer", "head", "retrieval", "retrieval_null_hi", "streaming", "streaming_null_hi", "sink", "sink_null_hi",
           "pattern", "kept_a_shape", "kept_vertical_slash", "kept_block_sparse", "role"]


def test_the_atlas_of_a_causal_model_decodes_its_own_probes(long_llama):
    import attnviz

    steps = []
    frame = attnviz.head_atlas(long_llama, tokens=600, needles=2, seed=1, progress=lambda *a: steps.append(a))
    L, H = long_llama.n_layers, long_llama.n_heads
    assert list(frame.columns) == COLUMNS and len(frame) == L * H
    assert frame[["layer", "head"]].values.tolist() == [[l, h] for l in range(L) for h in range(H)]
    assert set(frame.pattern) <= {*PATTERNS, "dense"} and set(frame.role) <= set(atlas.ROLES)
    scores = frame[COLUMNS[2:8] + COLUMNS[9:12]].to_numpy(float)
    assert np.isfinite(scores).all() and (scores >= -1e-9).all() and (scores <= 1 + 1e-9).all()
    assert [s[:2] for s in steps] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]  # two probes and two nulls
    for p in frame.attrs["probes"]:  # each probe holds its needle where the tokens say, and the model's own answer
        assert 560 <= p["tokens"] <= 640 and p["needle"][1] - p["needle"][0] >= 1
        g = long_llama.generate(p["text"])
        assert g.continuation == p["generated"]
        assert "".join(g.trace.tokens[slice(*p["needle"])]).replace("▁", "") == p["answer"]
    # the same call again gives the same table (probes and nulls drawn from the seed)
    again = attnviz.head_atlas(long_llama, tokens=600, needles=2, seed=1)
    assert again.equals(frame)


def test_the_knockout_check_removes_the_heads_it_names(long_llama):
    import attnviz
    from attnviz.analysis.interventions import Knockout, run

    frame = attnviz.head_atlas(long_llama, tokens=300, needles=1)
    check = attnviz.atlas_knockout(long_llama, frame, k=2, seed=0)
    order = frame.sort_values(["retrieval", "layer", "head"], ascending=[False, True, True], kind="stable")
    assert list(check.top) == [tuple(x) for x in order[["layer", "head"]].values[:2].tolist()]
    assert len(set(check.random) | set(check.top)) == 4
    assert list(check.table()["heads knocked out"]) == ["none", "top 2 retrieval", "2 random"]
    # the base recall against the model's own next-token argmax on the prompt with its answer
    p = frame.attrs["probes"][0]
    effect = run(long_llama, p["text"] + " " + p["answer"], [Knockout(*h) for h in check.top])
    tok = long_llama.tokenizer
    answer = tok(" " + p["answer"], add_special_tokens=False)["input_ids"]
    ids = tok.convert_tokens_to_ids(list(effect.base.trace.tokens))
    start = atlas.needle_span(effect.base.trace.tokens, len(ids), tok.convert_ids_to_tokens(answer))[0]
    n = len(answer)
    assert check.base == pytest.approx(np.mean(effect.base.top_ids[start - 1:start - 1 + n, 0] == ids[start:start + n]))
    assert check.without_top == pytest.approx(
        np.mean(effect.edited.top_ids[start - 1:start - 1 + n, 0] == ids[start:start + n]))


def test_an_encoder_gets_mass_scores_and_no_retrieval():
    import attnviz

    frame = attnviz.head_atlas("builtin:seed", tokens=400, needles=1)
    assert len(frame) == 6 * 8 and frame.retrieval.isna().all() and not frame.attrs["retrieval"]
    assert np.isfinite(frame[["streaming", "sink", "kept_a_shape"]].to_numpy()).all()
    assert set(frame.role) <= {"sink", "streaming", "full"}
    with pytest.raises(ValueError, match="causal language model"):
        attnviz.atlas_knockout("builtin:seed", frame)


@pytest.mark.parametrize("tokens, needles, match", [(10, 3, "at least 64"), (600, 0, "needles must be 1"),
                                                     (40_000, 3, "at most")])
def test_bad_settings_are_refused_in_words(tokens, needles, match):
    import attnviz

    with pytest.raises(ValueError, match=match):
        attnviz.head_atlas("builtin:seed", tokens=tokens, needles=needles)


def test_the_roles_page_long_context_section(long_llama):
    """AppTest: the section computes on a click, and its grid, table, knock-out table and CSV are the library's."""
    import attnviz
    from streamlit.runtime.memory_media_file_storage import _calculate_file_id

    from attnviz.export import file_stem

    from helpers import decode, ok, open_page
    from test_analysis_pages import charts, select

    folder = long_llama.key.removeprefix("hf:")
    view = dict(model=folder, text="The cat sat on the mat.", atlas_tokens="300", atlas_k="2")
    at = ok(open_page("pages/7_Roles.py", **view))  # (a typed model folder does not survive set_value: links)
    assert "atlas_grid" not in charts(at)  # nothing heavy until asked
    at = ok(open_page("pages/7_Roles.py", **view, atlas_on="true"))
    want = attnviz.head_atlas(long_llama, tokens=300, needles=3)
    check = attnviz.atlas_knockout(long_llama, want, k=2)
    heat, points, *legend = charts(at)["atlas_grid"]["data"]
    L, H = long_llama.n_layers, long_llama.n_heads
    names = list(atlas.ROLES)
    np.testing.assert_array_equal(decode(heat["z"]), want.role.map(names.index).to_numpy().reshape(L, H))
    custom = decode(points["customdata"])
    np.testing.assert_allclose(custom[:, 2:5], want[["retrieval", "retrieval_null_hi", "streaming"]], atol=1e-12)
    from attnviz.figures.atlas import CLASS_LABELS

    assert [t["name"] for t in legend] == [CLASS_LABELS[n] for n in names]
    table = {"atlas_table" if "retrieval" in d.value else "atlas_knockout": d.value for d in at.dataframe
             if "retrieval" in d.value or "needle recall" in d.value}
    assert len(table) == 2
    shown = table["atlas_table"].reset_index(drop=True)
    assert shown[["layer", "head", "pattern", "role"]].equals(want[["layer", "head", "pattern", "role"]])
    np.testing.assert_allclose(shown[["streaming", "sink", "kept_block_sparse"]], want[["streaming", "sink",
                                                                                       "kept_block_sparse"]])
    np.testing.assert_allclose(table["atlas_knockout"]["needle recall"], check.table()["needle recall"])
    (csv,) = [b for b in at.get("download_button") if b.proto.id.endswith("atlas_csv")]
    name = f"{file_stem(long_llama.key.removeprefix('hf:'))}_atlas.csv"
    assert csv.proto.url.endswith(_calculate_file_id(want.to_csv(index=False).encode(), "text/csv", name) + ".csv")


def test_a_click_on_the_atlas_opens_the_head_at_the_needle():
    import attnviz

    from helpers import ok, open_page
    from test_analysis_pages import select

    at = ok(open_page("pages/7_Roles.py", model="builtin:seed", text="The cat sat on the mat.", atlas_tokens="256",
                      atlas_needles="1", atlas_on="true"))
    probe = attnviz.head_atlas("builtin:seed", tokens=256, needles=1).attrs["probes"][0]
    assert any("an encoder generates nothing" in c.value for c in at.caption)
    at = select(at, "atlas_grid", {"x": 3, "y": 2, "point_index": 2 * 8 + 3, "curve_number": 1})
    assert at.session_state["layer"] == 2 and at.session_state["head"] == 3
    assert at.session_state["text"] == probe["text"]
    assert at.query_params.get("token") == str(probe["needle"][0])


def test_the_cli_prints_the_atlas_as_json(capsys):
    import attnviz
    from attnviz.cli import main

    assert main(["atlas", "builtin:seed", "--tokens", "256", "--needles", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = attnviz.head_atlas("builtin:seed", tokens=256, needles=1)
    assert out["model"] == "builtin:seed" and out["knockout"] is None and len(out["heads"]) == len(want)
    assert [h["role"] for h in out["heads"]] == list(want.role)
    np.testing.assert_allclose([h["sink"] for h in out["heads"]], want.sink, rtol=1e-6)
    assert out["probes"][0]["needle"] == list(want.attrs["probes"][0]["needle"])
    assert main(["atlas", "builtin:seed", "--tokens", "10"]) == 2
    assert "at least 64" in capsys.readouterr().err


def test_smollm2_has_heads_that_retrieve_above_their_null(smollm2):
    """The real model (its GGUF file, loaded once per session) answers its probes itself, and some heads copy the
    needle well above what they copy from a needle of random tokens."""
    import attnviz

    frame = attnviz.head_atlas(smollm2, tokens=1024, needles=2)
    probes = frame.attrs["probes"]
    assert all(p["generated"].strip().startswith(p["answer"]) for p in probes)  # it finds both codes
    above = frame[(frame.retrieval > frame.retrieval_null_hi) & (frame.retrieval >= 0.5)]
    assert len(above) >= 1, frame.sort_values("retrieval").tail()
    assert (frame.role == "retrieval").sum() >= 1 and (frame.role == "sink").sum() >= 1
