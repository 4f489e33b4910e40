"""Corpus: every head's statistics over a whole file of texts, as they come in, with the texts that stand out."""

import os
import tempfile
import time
from functools import partial
from pathlib import Path

import streamlit as st

from attnviz import corpus as cp
from attnviz.analysis.heads import STATS
from attnviz.data import CORPUS
from attnviz.figures.analysis import head_map
from attnviz.ui.frame import frame, plain
from attnviz.ui.heads import open_text
from attnviz.ui.share import allowed_models, code

f = frame("Corpus")
st.title("Corpus")
st.caption("Run every text of a file through the model and see what each head does across all of them: "
           "the Analysis page's statistics as distributions over texts, attention by token category, and the "
           "texts where each head stands out. Texts run in padded batches; padding never reaches a number.")

# uploads and finished shards (a rerun resumes)
WORK = Path(os.environ.get("ATTNVIZ_CORPUS_WORK") or Path(tempfile.gettempdir()) / "attnviz-corpus")
CORPUS_DIR = os.environ.get("ATTNVIZ_CORPUS_DIR")  # where the operator allows reading files by path
LABELS = {**{k: s.label for k, s in STATS.items()}, **{k: f"share on {v}" for k, v in cp.CATEGORIES.items()}}


def source() -> Path | None:
    """The chosen corpus file (the demo, an upload saved under WORK, or an allowed path), or None."""
    choices = ["demo", "upload"] + (["path"] if CORPUS_DIR else [])
    names = {"demo": "Demo: 400 generated sentences", "upload": "Upload a file", "path": "A file on the server"}
    how = st.radio("Corpus", choices, format_func=names.get, key="corpus_source", horizontal=True)
    if how == "demo":
        return CORPUS
    if how == "upload":
        up = st.file_uploader("A .txt (a text per line, or blank-line separated), .csv, .jsonl or .parquet file",
                              type=[e.lstrip(".") for e in cp.FORMATS], key="corpus_upload")
        if up is None:
            return None
        data = up.getvalue()
        path = WORK / f"{cp.digest(data)}{Path(up.name).suffix.lower()}"
        if not path.exists():
            WORK.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return path
    typed = st.text_input(f"Path under {CORPUS_DIR}", key="corpus_path")
    if not typed:
        return None
    root = Path(CORPUS_DIR).resolve()
    path = (root / typed).resolve()
    if not path.is_relative_to(root):
        st.error(f"Only files under {code(CORPUS_DIR)} can be read.")
        return None
    return path


def show(stats: cp.CorpusStats, name: str, what: str, where) -> None:
    """The grid, the table and the downloads of the statistics so far (again as each shard finishes)."""
    with where.container():
        st.plotly_chart(head_map(stats.grid(name, what), f"{LABELS[name]} · {what} over {stats.n_texts:,} texts",
                                 (0.0, float(stats.grid(name, what).max()) or 1.0), value_name=LABELS[name]),
                        key=f"corpus_grid_{stats.n_texts}")
        table = stats.table()
        st.dataframe(table, hide_index=True, key=f"corpus_table_{stats.n_texts}")
        base = f"attnviz_corpus_{f.key.replace(':', '-').replace('/', '-')}"
        d1, d2 = st.columns(2)
        d1.download_button("Download Parquet", table.to_parquet(index=False), f"{base}.parquet",
                           "application/vnd.apache.parquet", key=f"corpus_parquet_{stats.n_texts}")
        d2.download_button("Download CSV", table.to_csv(index=False), f"{base}.csv", "text/csv",
                           key=f"corpus_csv_{stats.n_texts}")


def top_texts(stats: cp.CorpusStats, corpus: cp.Corpus) -> None:
    st.header("Where each head stands out")
    c1, c2, c3 = st.columns(3)
    L, H = stats.values["entropy"].shape[1:]
    layer = c1.selectbox("Layer", list(range(L)), key="corpus_layer")
    head = c2.selectbox("Head", list(range(H)), key="corpus_head")
    by = c3.selectbox("Ranked by", list(LABELS), index=list(LABELS).index("max"), format_func=LABELS.get,
                      key="corpus_by")
    top = stats.top(by, 5)
    top = top[(top.layer == layer) & (top["head"] == head)]
    texts = cp.texts_by_id(corpus, top.text_id.unique())
    for end, title in (("most", "Highest"), ("least", "Lowest")):
        st.subheader(f"{title} {LABELS[by]}")
        for row in top[top.end == end].itertuples():
            text = texts.get(row.text_id, "")
            a, b = st.columns([6, 1])
            a.markdown(f"**{row.value:.3f}** · text {row.text_id} · {plain(text[:300])}")
            b.button("Open", key=f"corpus_open_{end}_{row.rank}", on_click=partial(open_text, text, layer, head),
                     help="Open this text on the Attention page at this head")


path = source()
if path is None:
    st.stop()
c1, c2, c3 = st.columns(3)
column = c1.text_input("Text column (.csv, .jsonl, .parquet)", "text", key="corpus_column")
limit = int(c2.number_input("At most this many texts", 1, 1_000_000, 1000, key="corpus_limit"))
ray = os.environ.get("ATTNVIZ_RAY_ADDRESS", "")
if allowed_models() is None:  # a locked demo: visitors do not pick where jobs run
    ray = c3.text_input("Ray address (optional)", ray, key="corpus_ray",
                        help="auto: a local Ray, or the cluster `ray start` made; or a cluster address. Empty: run here.")
try:
    corpus = cp.Corpus(path, column)
except ValueError as e:
    st.error(plain(str(e)))
    st.stop()
out = WORK / f"{cp.digest(f'{path.resolve()}|{f.key}|{column}|{limit}'.encode())}.parquet"
c1, c2 = st.columns(2)
name = c1.selectbox("Statistic", list(LABELS), format_func=LABELS.get, key="corpus_stat")
OVER = {"mean": "mean", **{f"p{q}": f"{q}th percentile" for q in (10, 25, 50, 75, 90)}}
what = c2.selectbox("Over texts", list(OVER), key="corpus_what", format_func=OVER.get)
results = st.empty()
before = 0
if cp.shard_dir(out).is_dir() and any(cp.shard_dir(out).glob("shard-*.npz")):
    so_far = cp.load_shards(cp.shard_dir(out), f.key)
    before = so_far.n_texts
    show(so_far, name, what, results)

go, stop = st.columns(2)
if go.button("Run", key="corpus_run", type="primary"):
    stop.button("Cancel", key="corpus_cancel", help="Stops after the running batch; finished shards are kept, "
                "so Run resumes where it stopped.")
    total = cp.count(corpus, limit)
    bar = st.progress(0.0, text=f"0 of {total:,} texts")
    started = time.monotonic()

    def progress(done: int) -> None:
        left = cp.estimate(done, total, started, before)
        bar.progress(min(done / total, 1.0), text=f"{done:,} of {total:,} texts"
                     + ("" if left is None else f" · about {left:,.0f} s left"))
        show(cp.load_shards(cp.shard_dir(out), f.key), name, what, results)

    try:
        final = cp.run(f.key, path, out, column, limit, ray.strip() or None, progress=progress, backend=f.model)
    except ValueError as e:
        st.error(plain(str(e)))
        st.stop()
    except ImportError:
        st.error("Ray is not installed here: pip install -r requirements-ray.txt, or leave the Ray address empty.")
        st.stop()
    bar.progress(1.0, text=f"{final.n_texts:,} texts in {time.monotonic() - started:,.1f} s")
    st.session_state["corpus_done"] = str(out)
    st.rerun()

if st.session_state.get("corpus_done") == str(out):
    top_texts(cp.load_shards(cp.shard_dir(out), f.key), corpus)
