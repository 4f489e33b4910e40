"""Corpus: every head's statistics over a whole file of texts, as they come in, with the texts that stand out."""

import time
from functools import partial
from pathlib import Path

import streamlit as st

from attnviz import corpus as cp
from attnviz import settings
from attnviz.analysis.heads import HEAD_STATS
from attnviz.data import CORPUS
from attnviz.figures.analysis import head_map
from attnviz.ui import corpus as files
from attnviz.ui import jobs
from attnviz.ui.frame import frame, page_cap, plain
from attnviz.ui.heads import open_text
from attnviz.ui.progress import Bar, again
from attnviz.ui.access import locked
from attnviz.ui.escape import code

f = frame("Corpus")
st.title("Corpus")
st.caption("Run every text of a file through the model and see what each head does across all of them: "
           "the Analysis page's statistics as distributions over texts, attention by token category, and the "
           "texts where each head stands out. Texts run in padded batches; padding never reaches a number.")

LABELS = {**{k: s.label for k, s in HEAD_STATS.items()}, **{k: f"share on {v}" for k, v in cp.CATEGORIES.items()}}
OVER = {"mean": "mean", **{f"p{q}": f"{q}th percentile" for q in (10, 25, 50, 75, 90)}}
TEXT_BYTES = 256 * 2**20  # the most text one file may hold once decoded (a Parquet file's own metadata first)
LOCKED = locked()  # a public demo or an operator's model list: visitors choose no path and no cluster


def source():
    """(the chosen corpus file, the name to call it, the upload or None), or None while there is none."""
    folder = settings.corpus_dir()
    choices = ["demo", "upload"] + (["path"] if folder and not LOCKED else [])
    names = {"demo": "Demo: 400 generated sentences", "upload": "Upload a file", "path": "A file on the server"}
    if st.session_state.get("corpus_source") not in choices:  # a crafted state or a lock set since: not offered
        st.session_state.pop("corpus_source", None)
    how = st.radio("Corpus", choices, format_func=names.get, key="corpus_source", horizontal=True)
    if how == "demo":
        return CORPUS, CORPUS.name, None
    if how == "upload":
        up = st.file_uploader("A .txt (a text per line, or blank-line separated), .csv, .jsonl or .parquet file",
                              type=[e.lstrip(".") for e in cp.FORMATS], key="corpus_upload")
        return None if up is None else (files.upload_path(up), up.name, up)
    typed = st.text_input(f"Path under {folder}", key="corpus_path")
    if not typed:
        return None
    root = Path(folder).resolve()
    path = (root / typed).resolve()
    if not path.is_relative_to(root):
        st.error(f"Only files under {code(folder)} can be read.")
        return None
    return path, typed, None


def headers(columns) -> dict:
    """Readable headers for a table's columns ("entropy_p90" -> "p90 · entropy (nats)"): the statistic first, since
    the table cuts a long header at its column's width (five columns read "entropy (nats)" when it came last); the
    whole name in the header's help."""
    config = {"n_texts": st.column_config.NumberColumn("texts")}
    for column in columns:
        name, _, what = column.rpartition("_")
        if name in LABELS:
            config[column] = st.column_config.NumberColumn(f"{what} · {LABELS[name]}", format="%.4f",
                                                           help=f"{LABELS[name]}: {OVER[what]} over texts")
    return config


def show(table, grid, n_texts: int, title: str, where) -> None:
    """The grid, the table and the downloads of the statistics so far (again as each shard finishes)."""
    with where.container():
        st.plotly_chart(head_map(grid, f"{title} over {n_texts:,} texts", (0.0, float(grid.max()) or 1.0),
                                 value_name=title), key=f"corpus_grid_{n_texts}")
        st.dataframe(table, hide_index=True, column_config=headers(table.columns), key=f"corpus_table_{n_texts}")
        base = f"attnviz_corpus_{f.model_key.replace(':', '-').replace('/', '-')}"
        d1, d2 = st.columns(2)
        d1.download_button("Download Parquet", table.to_parquet(index=False), f"{base}.parquet",
                           "application/vnd.apache.parquet", key=f"corpus_parquet_{n_texts}")
        d2.download_button("Download CSV", table.to_csv(index=False), f"{base}.csv", "text/csv",
                           key=f"corpus_csv_{n_texts}")


def top_texts(stats: cp.CorpusStats, texts: dict) -> None:
    st.header("Where each head stands out")
    c1, c2, c3 = st.columns(3)
    L, H = stats.values["entropy"].shape[1:]
    layer = c1.selectbox("Layer", list(range(L)), key="corpus_layer")
    head = c2.selectbox("Head", list(range(H)), key="corpus_head")
    by = c3.selectbox("Ranked by", list(LABELS), index=list(LABELS).index("max"), format_func=LABELS.get,
                      key="corpus_by")
    top = stats.top(by, 5)
    top = top[(top.layer == layer) & (top["head"] == head)]
    for end, title in (("most", "Highest"), ("least", "Lowest")):
        st.subheader(f"{title} {LABELS[by]}")
        for row in top[top.end == end].itertuples():
            text = texts.get(row.text_id, "")
            a, b = st.columns([6, 1])
            a.markdown(f"**{row.value:.3f}** · text {row.text_id} · {plain(text[:300])}")
            b.button("Open", key=f"corpus_open_{end}_{row.rank}", on_click=partial(open_text, text, layer, head),
                     help="Open this text on the Attention page at this head")


chosen = source()
if chosen is None:
    st.stop()
path, shown_as, up = chosen
c1, c2, c3 = st.columns(3)
column = c1.text_input("Text column (.csv, .jsonl, .parquet)", "text", key="corpus_column")
limit = int(c2.number_input("At most this many texts", 1, 1_000_000, 1000, key="corpus_limit"))
ray = settings.ray_address()  # the operator's; in a locked demo nothing a visitor sends changes it
if not LOCKED:
    ray = c3.text_input("Ray address (optional)", ray or "", key="corpus_ray",
                        help="auto: a local Ray, or the cluster `ray start` made; or a cluster address. "
                             "Empty: run here.").strip() or None
cap = page_cap()  # a text's first ATTNVIZ_PAGE_TOKENS, as every page but Attention reads
out = files.work() / f"{cp.digest(f'{path.resolve()}|{f.model_key}|{column}|{limit}|{cap}'.encode())}.parquet"
c1, c2 = st.columns(2)
name = c1.selectbox("Statistic", list(LABELS), format_func=LABELS.get, key="corpus_stat")
what = c2.selectbox("Over texts", list(OVER), format_func=OVER.get, key="corpus_what")
go, stop = st.columns(2)  # above the results, so Run stays where it is however many results show
clicked = go.button("Run", key="corpus_run", type="primary") or again("corpus")  # or the bar's "Run it again"
try:
    so_far = cp.load_shards(cp.shard_dir(out), f.model_key)
    files.show(out)
except ValueError:  # none finished yet
    so_far = None
done = so_far is not None and cp.finished(out, so_far)
corpus = None
if clicked or not done:  # a finished job needs no file: its results and top texts are kept
    try:
        corpus = cp.Corpus(files.keep(up) if up is not None else path, column, name=shown_as, max_bytes=TEXT_BYTES,
                           admit=partial(jobs.for_bytes, "Reading this file"))  # huge pages: admitted by memory
    except ValueError as e:
        st.error(plain(str(e)))
        st.stop()
for line in st.session_state.pop("corpus_notes", []):
    st.info(plain(line), icon=":material/healing:")
results = st.empty()
if so_far is not None and not done and cp.finished(out):
    st.warning("Some of this run's finished shards are damaged or gone: Run computes them again.", icon=":material/healing:")
if so_far is not None:
    show(so_far.table(), so_far.grid(name, what), so_far.n_texts, f"{LABELS[name]} · {OVER[what]}", results)

if clicked:
    stop.button("Cancel", key="corpus_cancel", help="Stops after the running batch; finished shards are kept, "
                "so Run resumes where it stopped.")
    notes: list[str] = []
    try:
        with files.running(out), jobs.slot("This corpus run", corpus.peak_bytes / 2**20):
            total = cp.count(corpus, limit)
            files.make_room(cp.job_bytes(total, f.model.n_layers * f.model.n_heads, corpus.path.stat().st_size))
            started, totals, before = time.monotonic(), cp.Totals(), so_far.n_texts if so_far else 0
            bar = Bar("Running the corpus…", "corpus", every_step=True,
                      resumes="its finished shards are kept, and Run goes on from the first one missing.")

            def tick(done: int) -> None:
                """Before every batch: the bar moves, and a rerun or a closed tab stops the job here."""
                left = cp.estimate(done, total, started, before)
                bar(done / max(total, 1), f"{done:,} of {total:,} texts"
                    + ("" if left is None else f" · about {left:,.0f} s left"))

            tick(before)  # a resumed run starts at the texts its kept shards hold

            def progress(done: int) -> None:
                tick(done)
                shown = "mean" if what == "mean" else "mean (percentiles when the run ends)"
                show(totals.table(), totals.grid(name), totals.n_texts, f"{LABELS[name]} · {shown}", results)

            final = cp.run(f.model_key, corpus, out, column, limit, ray, progress=progress, backend=f.model,
                           max_tokens=cap, tick=tick, note=notes.append, totals=totals)
            cp.keep_top_texts(final, corpus, out)
            bar.done()
    except ValueError as e:
        st.error(plain(str(e)))
        st.stop()
    except ImportError:
        st.error("Ray is not installed here: pip install -r requirements-ray.txt, or leave the Ray address empty.")
        st.stop()
    files.let_go()  # the results and top texts are kept; the upload itself is no longer needed on disk
    st.session_state["corpus_notes"] = notes
    st.rerun()

if done:
    top_texts(so_far, cp.top_texts(out))
