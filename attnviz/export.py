"""Files behind a view: the whole trace as ``.npz``, a head or the head statistics as CSV, a figure as HTML.

Pure functions (no Streamlit): the app's download buttons and the command line both use them.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from .core.tokens import labels
from .core.trace import AttentionTrace, Seq2SeqTrace
from .core.weights import given_weights

FORMAT = "attnviz.trace"
VERSION = 1
IMAGE_FORMATS = ("png", "svg", "pdf")


def file_stem(model: str) -> str:
    """``attnviz_<model>`` with only characters no file system minds: ``attnviz_builtin-minilm``."""
    return "attnviz_" + (re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.") or "model")


def figure_name(model: str, layer: int, head: int | None, view: str = "") -> str:
    """A figure's file name stem: ``attnviz_builtin-minilm_L3_H7`` (``view`` goes before the layer)."""
    return "_".join([file_stem(model)] + ([view] if view else []) + [f"L{layer}", f"H{'mean' if head is None else head}"])


def _stack_meta(t: AttentionTrace) -> dict:
    return {
        "model": t.model,
        "kind": t.kind,
        "text": t.text,
        "truncated": int(t.truncated),
        "tokens": list(t.tokens),
        "norms": sorted(t.norms),
        "hidden_states": t.hidden_states is not None,
    }


def metadata(trace) -> dict:
    """Everything in a trace that is not an array, as plain JSON-ready values."""
    head = {"format": FORMAT, "version": VERSION}
    if isinstance(trace, Seq2SeqTrace):
        return {**head, "kind": trace.kind, "generated": bool(trace.generated),
                "encoder": _stack_meta(trace.encoder), "decoder": _stack_meta(trace.decoder)}
    return {**head, **_stack_meta(trace)}


def _stack_arrays(t: AttentionTrace, prefix: str = "") -> dict[str, np.ndarray]:
    arrays = {"attentions": t.attentions, "special": t.special, "word_ids": t.word_ids}
    if t.hidden_states is not None:
        arrays["hidden_states"] = t.hidden_states
    arrays |= {f"norms/{k}": v for k, v in t.norms.items()}
    return {prefix + k: v for k, v in arrays.items()}


def to_npz(trace, extra: dict | None = None) -> bytes:
    """The trace as ``.npz``: its arrays plus ``meta``, a JSON string; loads with allow_pickle=False.
    ``extra`` arrays (e.g. a generation's ``generation/*``) are written beside them; ``from_npz`` ignores them.

    Uncompressed: float32 weights barely compress (75 MB -> 75 MB at 512 tokens) and zipping takes seconds.
    """
    if isinstance(trace, Seq2SeqTrace):
        arrays = _stack_arrays(trace.encoder, "encoder/") | _stack_arrays(trace.decoder, "decoder/")
        arrays["cross_attentions"] = trace.cross_attentions
    else:
        arrays = _stack_arrays(trace)
    # A 0-d unicode array, not an object array: numpy reads it back without pickle.
    arrays["meta"] = np.array(json.dumps(metadata(trace), ensure_ascii=False))
    arrays |= extra or {}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


MAX_NPZ_MB = 512  # the most a trace file may hold once decompressed (a 512-token BERT-base trace: ~160 MB)
_META_FIELDS = {"model": str, "kind": str, "text": str, "truncated": int, "tokens": list, "norms": list,
                "hidden_states": bool}


def _bad(why: str) -> ValueError:
    return ValueError(f"this .npz is not a valid attnviz trace: {why}")


def _member_sizes(zf, max_bytes: int) -> None:
    """Refuse a file whose arrays would take more than ``max_bytes``, from the zip and .npy headers alone
    (a few compressed MB can expand to gigabytes); only plain numeric, boolean and text arrays pass."""
    total = 0
    for info in zf.infolist():
        if not info.filename.endswith(".npy"):
            raise _bad(f"unexpected member {info.filename!r}")
        total += info.file_size
        if total > max_bytes:
            break
        with zf.open(info) as f:
            try:
                version = np.lib.format.read_magic(f)
                read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
                if version not in read:
                    raise ValueError(f".npy format version {version}")
                shape, _, dtype = read[version](f)
            except Exception as e:  # a damaged or foreign header: numpy's own words, as the reason
                raise _bad(f"member {info.filename!r} has no valid array header ({e})") from None
        if dtype.hasobject or dtype.kind not in "biufU":
            raise _bad(f"member {info.filename!r} holds {dtype} values")
        total += max(0, int(np.prod(shape, dtype=np.float64)) * dtype.itemsize - info.file_size)
    if total > max_bytes:
        raise ValueError(f"this .npz expands to more than {max_bytes / 2**20:,.0f} MB, over the limit for a trace "
                         f"file (raise it with from_npz(..., max_mb=…))")


def _weights(files, name: str, max_mb: float) -> np.ndarray:
    """Member ``name``: (L, H, Tq, Tk) weights checked as given weights are (``given_weights``), read-only float32."""
    a = _member(files, name, finite=False)  # given_weights says where a NaN is
    if a.ndim != 4:
        raise _bad(f"{name} must be weights of 4 dimensions (layers, heads, queries, keys), not of shape {a.shape}")
    try:
        return given_weights(list(a), name, max_mb, "raise it with from_npz(..., max_mb=…)")
    except ValueError as e:
        raise _bad(str(e)) from None


def _member(files, name: str, finite: bool = True) -> np.ndarray:
    if name not in files.files:
        raise _bad(f"it has no {name!r} member")
    a = files[name]
    if finite and a.dtype.kind in "fc" and not np.isfinite(a).all():
        raise _bad(f"{name} holds NaN or infinite values")
    return a


def _stack_meta_ok(meta, where: str) -> dict:
    if not isinstance(meta, dict):
        raise _bad(f"its {where} is not a JSON object")
    for field, kind in _META_FIELDS.items():
        value = meta.get(field)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _bad(f"{where} field {field!r} must be {kind.__name__}, not {type(value).__name__}")
    if not all(isinstance(t, str) for t in meta["tokens"]) or not all(isinstance(n, str) for n in meta["norms"]):
        raise _bad(f"{where} tokens and norms must be lists of strings")
    return meta


def _stack_from(files, meta, max_mb: float, prefix: str = "", where: str = "meta") -> AttentionTrace:
    meta = _stack_meta_ok(meta, where)
    return AttentionTrace(
        tokens=meta["tokens"],
        attentions=_weights(files, prefix + "attentions", max_mb),
        hidden_states=_member(files, prefix + "hidden_states") if meta["hidden_states"] else None,
        norms={k: _member(files, f"{prefix}norms/{k}") for k in meta["norms"]},
        special=_member(files, prefix + "special"),
        word_ids=_member(files, prefix + "word_ids"),
        model=meta["model"],
        kind=meta["kind"],
        text=meta["text"],
        truncated=meta["truncated"],
    )


def _file_name(source) -> str:
    """The file ``from_npz`` reads, as a message names it: its name, or "this .npz" for bytes."""
    name = source if isinstance(source, (str, os.PathLike)) else getattr(source, "name", None)
    return f"{os.fspath(name)!r}" if isinstance(name, (str, os.PathLike)) else "this .npz"


def from_npz(source, max_mb: float = MAX_NPZ_MB) -> AttentionTrace | Seq2SeqTrace:
    """Read a trace written by ``to_npz`` (bytes, a path or a binary file), checked as the trace is built.

    Anything else (damaged, foreign, NaN/negative/complex weights, rows not summing to 1, over ``max_mb`` MB
    once expanded) is refused with a ValueError that says why.
    """
    if isinstance(source, (bytes, bytearray)):
        source = io.BytesIO(source)
    try:
        with zipfile.ZipFile(source) as zf:
            _member_sizes(zf, int(max_mb * 2**20))
    except zipfile.BadZipFile:
        raise ValueError("this file is not an .npz (a zip of arrays), so not an attnviz trace") from None
    if hasattr(source, "seek"):
        source.seek(0)
    with np.load(source, allow_pickle=False) as files:
        if "meta" not in files.files:
            raise ValueError("this .npz is not an attnviz trace: it has no 'meta' member")
        try:
            meta = json.loads(str(files["meta"]))
        except json.JSONDecodeError as e:
            raise _bad(f"its meta is not JSON ({e})") from None
        except RecursionError:  # json.loads recurses once per nesting level: 100,000 '[' overflow the stack
            raise ValueError(f"{_file_name(source)} is not a valid attnviz trace: its meta nests JSON lists or "
                             "objects too deeply to be a trace's description") from None
        if not isinstance(meta, dict):
            raise _bad("its meta is not a JSON object")
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ValueError(f"unsupported trace file: format {meta.get('format')!r}, version {meta.get('version')!r}")
        if meta.get("kind") == "encoder-decoder":
            if not isinstance(meta.get("generated"), bool):
                raise _bad("meta field 'generated' must be bool")
            return Seq2SeqTrace(
                encoder=_stack_from(files, meta.get("encoder"), max_mb, "encoder/", "encoder meta"),
                decoder=_stack_from(files, meta.get("decoder"), max_mb, "decoder/", "decoder meta"),
                cross_attentions=_weights(files, "cross_attentions", max_mb),
                generated=meta["generated"],
            )
        return _stack_from(files, meta, max_mb)


def head_matrix(trace, layer: int, head: int | None, stack: str = "encoder") -> tuple[np.ndarray, list, list]:
    """One head's (Tq, Tk) weights with query and key labels; ``head`` None is the layer's mean over heads.

    ``stack`` picks "encoder", "decoder" or "cross" attention of an encoder–decoder trace.
    """
    s = trace.stack(stack if isinstance(trace, Seq2SeqTrace) else None)
    return trace.head(layer, head, s.name), labels(s.queries.tokens), labels(s.keys.tokens)


def _cell(label: str) -> str:
    """A label safe in a spreadsheet: a leading = + - @ would make Excel read a formula (CSV injection)."""
    return "'" + label if len(label) > 1 and label[0] in "=+-@\t\r" else label


def matrix_csv(attn: np.ndarray, q_labels, k_labels) -> str:
    """A (Tq, Tk) matrix as CSV: a header of key labels, then one row per query."""
    attn = np.asarray(attn)
    if attn.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"matrix is {attn.shape} but there are {len(q_labels)} × {len(k_labels)} labels")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["query \\ key"] + [_cell(k) for k in k_labels])
    for q, row in zip(q_labels, attn):
        w.writerow([_cell(q)] + [f"{x:.6g}" for x in row])
    return out.getvalue()


def stats_csv(trace) -> str:
    """The Analysis page's head statistics (``attnviz.analysis.heads``) as CSV, one row per (stack, layer, head).

    Cross-attention rows of an encoder–decoder carry only the statistics that need no shared positions.
    """
    from .analysis import heads

    if isinstance(trace, Seq2SeqTrace):
        cross = trace.cross_attentions
        parts = [("encoder", heads.head_stats(trace.encoder)), ("decoder", heads.head_stats(trace.decoder)),
                 ("cross", {"entropy": heads.entropy(cross), "max": heads.largest(cross),
                            **{k: heads.share(cross, m) for k, m in heads.key_masks(trace.encoder).items()}})]
    else:
        parts = [(trace.kind, heads.head_stats(trace))]
    names = list(heads.HEAD_STATS)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["stack", "layer", "head", *names])
    for stack, stats in parts:
        L, H = next(iter(stats.values())).shape
        for layer in range(L):
            for head in range(H):
                w.writerow([stack, layer, head, *(f"{stats[n][layer, head]:.6g}" if n in stats else "" for n in names)])
    return out.getvalue()


def figure_html(fig, offline: bool = True) -> str:
    """A standalone HTML page of ``fig``. ``offline`` inlines plotly.js (~4.8 MB) so the file works
    without a network and keeps working as CDNs change; ``offline=False`` loads it from the CDN (~10 kB)."""
    page = fig.to_html(include_plotlyjs=True if offline else "cdn", full_html=True, config={"displaylogo": False})
    return page.replace("<head>", f"<head><title>{page_title(fig)}</title>", 1)


def page_title(fig) -> str:
    """The figure's title as a page's ``<title>``: plotly markup (``<br>``, ``<b>``) dropped; labels in a
    figure are escaped already, so the text stays escaped."""
    text = re.sub(r"<[^>]*>", " ", fig.layout.title.text or "")
    return " ".join(text.split()) or "attnviz"


def write_figure(fig, path, offline: bool = True) -> Path:
    """Write ``fig`` to ``path``: .html (plotly.js inlined unless ``offline`` is False), or .png/.svg/.pdf.

    Images are rendered by kaleido, which needs Chrome or Chromium on this machine.
    """
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    if ext == "html":
        path.write_text(figure_html(fig, offline), encoding="utf-8")
        return path
    if ext not in IMAGE_FORMATS:
        raise ValueError(f"cannot write {path.name!r}: the file name must end in .html, "
                         + ", ".join(f".{e}" for e in IMAGE_FORMATS))
    try:
        from choreographer.browsers.chromium import Chromium  # kaleido's browser driver
    except ImportError:
        raise ValueError(f"writing .{ext} needs the kaleido package (pip install kaleido==1.5.0); "
                         ".html does not") from None
    if Chromium.find_browser(skip_local=False) is None:
        raise ValueError(f"writing .{ext} needs Chrome or Chromium for kaleido (apt-get install chromium, "
                         "or set BROWSER_PATH); .html needs neither")
    path.write_bytes(fig.to_image(format=ext, scale=1 if ext != "png" else 2))
    return path


def head_figures(trace, layer: int, head: int | None, stack: str = "encoder", reducer=None) -> list:
    """One head's figures within the pages' budgets, a few MB at any length, the head itself first: up to CELLS tokens
    a side the whole head cell by cell; past that what the Attention page draws of a long text: the head at block
    resolution, an exact window of its first CELLS tokens, and every head pooled (one image). ``reducer``: the survey
    read during the trace's forward (``analysis.long.traced`` with CELLS blocks), else one pass over its weights."""
    import html

    from .analysis.long import survey, window
    from .figures import long as figs
    from .figures.explorer import CELLS, head_name, overview_size
    from .figures.attention import attention_heatmap

    side = stack if isinstance(trace, Seq2SeqTrace) else None
    trace.row(layer, head, 0, side)  # one row: a layer or head out of range is a ValueError in words
    s = trace.stack(side)
    _, H, Tq, Tk = s.weights.shape
    where = f"{s.name} · " if side not in (None, "encoder") else ""
    name = head_name(layer, head, H)
    title = f"{html.escape(trace.model)} · {where}{name}"
    if Tq != Tk or Tq <= CELLS:  # cross-attention has as many rows as the decoder's tokens
        return [attention_heatmap(*head_matrix(trace, layer, head, stack), title)]
    small = overview_size(*s.weights.shape[:2])
    done = reducer is not None and reducer.complete(s.weights.shape)
    found = reducer.result(small) if done else survey(s.weights, small, CELLS)
    blocks = found.layer_max[layer] if head is None else found.pooled("detail", "max")[layer, head]  # (s, s)
    stop = CELLS
    return [figs.blocks_heatmap(blocks, found.starts["detail"], found.block("detail"), Tq, title, "max", (0, stop)),
            figs.window_heatmap(window(s.weights, layer, head, 0, stop), 0, s.queries.tokens, title),
            figs.head_mosaic(found.pooled("overview", "max"), "max", Tq, found.block("overview"), (layer, head))]


def figures_html(figures, offline: bool = True) -> str:
    """One standalone HTML page of ``figures``, one under another, plotly.js inlined once (``offline``) or loaded
    from its CDN; titled after the first."""
    parts = [fig.to_html(include_plotlyjs=(True if offline else "cdn") if i == 0 else False, full_html=False,
                         config={"displaylogo": False}) for i, fig in enumerate(figures)]
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{page_title(figures[0])}</title></head>'
            f"<body>{''.join(parts)}</body></html>")


def write_figures(figures, path, offline: bool = True) -> Path:
    """Write ``figures`` (``head_figures``) to ``path``: .html holds them all, an image (.png, .svg, .pdf) the first."""
    path = Path(path)
    if path.suffix.lower() == ".html":
        path.write_text(figures_html(figures, offline), encoding="utf-8")
        return path
    return write_figure(figures[0], path, offline)
