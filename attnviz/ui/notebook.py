"""The attention explorer in a notebook: ``show(trace)``, a trace's own display, and bertviz's calls.

An anywidget (no CDN, no requirejs: its ES module and style, ui/static/notebook.js and notebook.css read at import,
travel inside the widget's state, so JupyterLab, Notebook 7, VS Code and Colab load it alike). Heatmaps are drawn on a
<canvas> from the weights themselves, not with plotly.js: plotly.js is ~3.5 MB of script that every widget would carry
in its state and in the saved notebook, while the canvas code is a few KB and the weights a head needs are sent once,
as float32 binary (exact: hover reads them, and the colours follow the app's own scale and ranges). The overview is
the app's mosaic (``figures.overview.mosaic``) as a PNG.

What it shows is the app's explorer model (``figures.explorer``), computed for what is on screen only: a stack up to
CELLS × CELLS cells sends its whole head; a longer one sends the head at block resolution and an exact window, as the
Attention page does. Without a kernel (nbconvert, a rendered notebook) the cell
shows static PNGs of the overview and the head. Never imports Streamlit.
"""

from __future__ import annotations

import html
import json
from functools import lru_cache
from importlib import resources

import numpy as np
import plotly.colors
from plotly.utils import image_array_to_data_uri

from ..core.outputs import from_attentions
from ..core.tokens import clean
from ..core.trace import AttentionTrace, Seq2SeqTrace, stacks
from ..core.weights import pool
from ..figures.common import lut
from ..figures.explorer import WINDOW_MAX, Explorer, overview_size
from ..figures.overview import MASK_COLOUR, TILE, mosaic
from ..figures.view import colour_top

STATIC_PIXELS = 256  # the most pixels a side of the static head image
INSTALL = "the notebook explorer needs anywidget: pip install 'attnviz[notebook]' (or -r requirements-notebook.txt)"
STATIC = resources.files(__package__) / "static"  # package data: the widget's script and style as real files
ESM = (STATIC / "notebook.js").read_text(encoding="utf-8")
CSS = (STATIC / "notebook.css").read_text(encoding="utf-8")


def raw_tokens(labels) -> dict[str, str]:
    """{position: raw token} of each label cleaned from a token that reads otherwise ("Ġcat" for "cat"): the hover
    names it beside the label, as the figures' hovers do; positions whose token reads as itself are left out."""
    return {str(i): s.raw for i, s in enumerate(labels) if clean(s.raw) != s.raw}


def _f32(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, np.float32).tobytes()


class View(Explorer):
    """The explorer model of one stack (``figures.explorer.Explorer``, the app's) as the widget's plain data."""

    def overview_image(self) -> tuple[np.ndarray, int, int]:
        """(the app's mosaic of every head, tile pitch down, tile pitch across) in pixels, gaps included: the detail
        blocks pooled to the overview's, as the Attention page pools them."""
        tile = overview_size(self.L, self.H) if self.long else TILE
        image = mosaic(self.pooled(), self.block_mask(), tile=tile)
        return image, (image.shape[0] + 1) // self.L, (image.shape[1] + 1) // self.H

    def overview(self) -> dict:
        image, pq, pk = self.overview_image()
        scale = "each head on its own colour range"
        if self.long:
            scale = f"block max of {self.block('overview')[1]:,}-token blocks · {scale}"
        return dict(png=image_array_to_data_uri(image), pitch=[pq, pk], size=[image.shape[0], image.shape[1]],
                    title=f"all {self.L} layers × {self.H} heads · {scale} · click a head to open it")

    def detail(self, layer: int, head: int | None, window: tuple[int, int]) -> dict:
        """One head: whole (short) or at block resolution with an exact window (long)."""
        name = self.head_name(layer, head)
        if not self.long:
            w = self.head(layer, head)
            masked = self.mask(0, self.Tq, 0, self.Tk)
            return dict(title=name, rows=[0, self.Tq], cols=[0, self.Tk], top=colour_top(w, masked),
                        weights=_f32(w), causal=self.causal)
        start, stop = window
        w = self.window(layer, head, start, stop)
        rows, cols = [start, start + w.shape[0]], [start, start + w.shape[1]]
        b = self.block_map(layer, head)  # (s_q, s_k)
        bq, bk = self.block()
        return dict(title=f"{name} · tokens {start:,}–{rows[1] - 1:,}, exact weights", rows=rows, cols=cols,
                    top=colour_top(w, self.mask(*rows, *cols)), weights=_f32(w), causal=self.causal,
                    blocks=dict(title=f"{name} · block max of {bk:,}-token blocks · click to zoom",
                                shape=list(b.shape), block=[bq, bk], top=max(float(np.percentile(b, 99.5)), 1e-6),
                                weights=_f32(b)))

    def focus(self, layer: int, head: int | None, index: int, direction: str) -> dict:
        """One token's weights (its row, "to", or its column, "from") in the head and in every head of the layer."""
        token = (self.q_tokens if direction == "to" else self.k_tokens)[index]
        word = clean(token) if len(clean(token)) <= 20 else clean(token)[:19] + "…"
        what = f"what “{word}” attends to" if direction == "to" else f"what attends to “{word}”"
        every = np.stack([self.line(layer, h, index, direction) for h in range(self.H)])  # (H, T)
        one = every.mean(0) if head is None else every[head]
        return dict(title=f"{what} · {self.head_name(layer, head)}", heads_title=f"{what} · every head of layer {layer}",
                    index=index, direction=direction, weights=_f32(one), heads=_f32(every),
                    top=max(float(every.max()), 1e-6))

    def links(self, query: int, key: int) -> dict:
        """The weight query ``query`` gives key ``key`` in every head, (L, H)."""
        values = np.array([[self.line(l, h, query, "to")[key] for h in range(self.H)] for l in range(self.L)])
        hidden = bool(self.mask(query, query + 1, key, key + 1)[0, 0]) if self.causal else False
        return dict(title=f"how much “{self.q_labels[query]}” attends to “{self.k_labels[key]}” · click a head to open it",
                    query=query, key=key, weights=_f32(values), top=max(float(values.max()), 1e-6),
                    note="A causal model's query never sees a later token: every head gives this pair 0." if hidden else "")

    def static_images(self, layer: int, head: int | None) -> tuple[np.ndarray, np.ndarray, str]:
        """(overview RGB, head RGB, head title): the static display, the head at most STATIC_PIXELS a side."""
        if self.long:
            w, masked = self.block_map(layer, head), None
            title = f"{self.head_name(layer, head)} · block max of {self.block()[1]:,}-token blocks"
        else:
            w, masked = self.head(layer, head), self.mask(0, self.Tq, 0, self.Tk)
            title = self.head_name(layer, head)
        top = colour_top(w, masked)
        small = pool(pool(w, STATIC_PIXELS, 0), STATIC_PIXELS, 1)
        rgb = lut()[np.rint(np.clip(small / top, 0, 1) * 255).astype(np.uint8)]
        if masked is not None:
            hidden = pool(pool(masked.astype(np.uint8), STATIC_PIXELS, 0, "min"), STATIC_PIXELS, 1, "min").astype(bool)
            rgb[hidden] = np.array(plotly.colors.hex_to_rgb(MASK_COLOUR), np.uint8)
        return self.overview_image()[0], rgb, title


def stack_names(trace) -> list[str]:
    return list(stacks(trace))


def static_html(trace, layer: int = 0, head: int | None = 0, stack: str | None = None) -> str:
    """The explorer as plain HTML with two PNGs (the overview and the head): what a cell shows without a kernel."""
    view = View(trace, stack or stack_names(trace)[0])
    overview, detail, title = view.static_images(layer, head)
    model = html.escape(trace.model or "attention", quote=False)
    parts = [f'<div class="attnviz-static"><p><b>attnviz</b> · {model} · {view.Tq:,} tokens · '
             f"{view.L} layers × {view.H} heads (static image: run the notebook for the explorer)</p>"]
    for caption, image in ((f"all {view.L} layers × {view.H} heads", overview), (title, detail)):
        alt = html.escape(caption)
        parts.append(f'<figure style="display:inline-block;margin:4px;vertical-align:top">'
                     f'<img src="{image_array_to_data_uri(image)}" alt="{alt}" style="max-width:480px;'
                     f'image-rendering:pixelated"/><figcaption>{alt}</figcaption></figure>')
    return "".join(parts) + "</div>"


def static_bundle(trace, layer: int = 0, head: int | None = 0, stack: str | None = None) -> dict:
    """text/html (both PNGs, each stored once: no image/png beside it) for a trace, with a one-line text/plain."""
    view = View(trace, stack or stack_names(trace)[0])
    return {"text/html": static_html(trace, layer, head, stack),
            "text/plain": f"<attnviz explorer: {trace.model or 'attention'}, {view.Tq} tokens>"}


@lru_cache(maxsize=1)
def explorer_class():
    """The widget class, built on first use so that ``import attnviz`` does not need anywidget."""
    try:
        import anywidget
        import traitlets
    except ImportError as e:
        raise ImportError(INSTALL) from e

    class Explorer(anywidget.AnyWidget):
        """Every head, a head in detail, token focus and which heads link two tokens, for one trace."""

        _esm = ESM
        _css = CSS
        info = traitlets.Dict().tag(sync=True)  # model, stacks, sizes, colour scale
        # {"q": [...], "k": [...]} unique labels of the stack shown, "q_raw"/"k_raw": {position: raw token} (raw_tokens)
        labels = traitlets.Dict().tag(sync=True)
        overview = traitlets.Dict().tag(sync=True)
        view = traitlets.Dict().tag(sync=True)  # what the page asks for: stack, layer, head, focus, direction, …
        detail = traitlets.Dict().tag(sync=True)
        focus = traitlets.Dict().tag(sync=True)
        links = traitlets.Dict().tag(sync=True)
        error = traitlets.Unicode("").tag(sync=True)

        def __init__(self, trace, layer: int = 0, head: int | None = 0, stack: str | None = None):
            if not isinstance(trace, (AttentionTrace, Seq2SeqTrace)):
                raise TypeError(f"show() takes a trace (attnviz.trace(...) or attnviz.from_attentions(...)), "
                                f"not {type(trace).__name__}")
            self.trace, self._views, self._shown, self._refused = trace, {}, {}, []
            names = stack_names(trace)
            super().__init__()
            with self.hold_sync():
                self.info = dict(model=trace.model, stacks=names, lut=lut().ravel().tolist(), mask=MASK_COLOUR,
                                 window_max=WINDOW_MAX)
                self.view = dict(stack=stack or names[0], layer=layer, head=head)
            if self.error:  # a call from code is told at once
                raise ValueError(self.error)

        def _view(self, name: str) -> View:
            if name not in self._views:
                self._views[name] = View(self.trace, name)
            return self._views[name]

        def _checked(self, asked: dict) -> dict:
            """(``asked`` completed and checked against the trace, what was refused in words): a value out of range
            keeps the one shown."""
            names = self.info["stacks"]
            stack = asked.get("stack") if asked.get("stack") in names else names[0]
            v = self._view(stack)
            old = self._shown if self._shown.get("stack") == stack else {}
            refused = []

            def pick(key, default, count, none_ok=False):
                value, kept = asked.get(key, old.get(key, default)), old.get(key, default)
                if value is None and none_ok:
                    return None
                if isinstance(value, (int, float)) and value == int(value) and 0 <= value < count:
                    return int(value)
                refused.append(f"{key} {value!r} is out of range (0–{count - 1})")
                return kept

            layer = pick("layer", 0, v.L)
            head = pick("head", 0, v.H, none_ok=True)
            direction = asked.get("direction", old.get("direction", "to"))
            direction = direction if direction in ("to", "from") else "to"
            count = v.Tq if direction == "to" else v.Tk
            focus = pick("focus", min(1, count - 1), count)
            size = max(1, min(v.Tq, pick("size", min(64, v.Tq), WINDOW_MAX + 1)))
            start = min(pick("start", 0, v.Tq), max(0, v.Tq - size))
            query = pick("query", max(0, v.Tq - 2), v.Tq)
            key = pick("key", min(1, v.Tk - 1), v.Tk)
            return dict(stack=stack, layer=layer, head=head, direction=direction, focus=focus, start=start, size=size,
                        query=query, key=key), refused

        @traitlets.observe("view")
        def _on_view(self, change) -> None:
            """Compute what the view asks for that is not on screen yet; nothing else."""
            new, refused = self._checked(change["new"])
            if new != change["new"]:
                self._refused = refused
                self.view = new  # sends the corrected view back; this observer runs again with it
                return
            refused, self._refused = self._refused or refused, []
            self.error = "; ".join(refused)
            old, self._shown = self._shown, new
            v = self._view(new["stack"])
            same = lambda *keys: all(old.get(k) == new[k] for k in keys)  # noqa: E731
            try:
                with self.hold_sync():
                    if not same("stack"):
                        self.labels = dict(q=v.q_labels, k=v.k_labels, q_raw=raw_tokens(v.q_labels),
                                           k_raw=raw_tokens(v.k_labels))
                        self.info = self.info | dict(long=v.long, L=v.L, H=v.H, Tq=v.Tq, Tk=v.Tk, causal=v.causal,
                                                     stack=v.name)
                        self.overview = v.overview()
                    if not same("stack", "layer", "head", "start", "size"):
                        self.detail = v.detail(new["layer"], new["head"], (new["start"], new["start"] + new["size"]))
                    if not same("stack", "layer", "head", "focus", "direction"):
                        self.focus = v.focus(new["layer"], new["head"], new["focus"], new["direction"])
                    if not same("stack", "query", "key"):
                        self.links = v.links(new["query"], new["key"])
            except ValueError as e:  # a trace refusing what was asked says why, in words
                self.error = str(e)

        def _repr_mimebundle_(self, **kwargs):
            """The widget where a kernel renders it, and static PNGs beside it for a notebook read without one."""
            bundle = super()._repr_mimebundle_(**kwargs)
            data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
            v = self._shown
            static = static_bundle(self.trace, v.get("layer", 0), v.get("head", 0), v.get("stack"))
            return {**static, **data}, meta

        def state_bytes(self) -> int:
            """Bytes of the whole state the widget sends to a page (JSON and binary buffers, its script included)."""
            from ipywidgets.widgets.widget import _remove_buffers

            state, _, buffers = _remove_buffers(self.get_state())
            return len(json.dumps(state)) + sum(len(b) for b in buffers)

    return Explorer


def explorer(trace, layer: int = 0, head: int | None = 0, stack: str | None = None):
    """The explorer widget of ``trace`` (shown when it is a cell's last value); ``head`` None: the layer's mean."""
    return explorer_class()(trace, layer, head, stack)


def _display(widget) -> None:
    from IPython.display import display

    display(widget)


def show(trace, layer: int = 0, head: int | None = 0, stack: str | None = None) -> None:
    """Display the explorer of ``trace`` in the notebook cell."""
    _display(explorer(trace, layer, head, stack))


def _returned(widget):
    """What bertviz's ``html_action="return"`` gives: an ``IPython.display.HTML`` whose ``.data`` is a standalone page
    (the static display, to write to a file), shown in a kernel as the explorer itself (``.widget``)."""
    from IPython.display import HTML

    class ExplorerHTML(HTML):
        def _repr_mimebundle_(self, **kwargs):
            return self.widget._repr_mimebundle_(**kwargs)

    v = widget._shown
    body = static_html(widget.trace, v.get("layer", 0), v.get("head", 0), v.get("stack"))
    page = ExplorerHTML(f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>attnviz</title></head><body>{body}'
                        "</body></html>")
    page.widget = widget
    return page


def _bertviz(attention, tokens, layer, heads, html_action, **stacks_):
    if html_action not in ("view", "return"):
        raise ValueError(f"html_action must be 'view' or 'return', not {html_action!r}")
    trace = from_attentions(attention, tokens, **stacks_)
    widget = explorer(trace, layer or 0, heads[0] if heads else 0)
    if html_action == "return":
        return _returned(widget)
    _display(widget)
    return None


def head_view(attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, layer=None, heads=None,
              encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None,
              decoder_tokens=None, include_layers=None, html_action="view"):
    """bertviz's ``head_view``: the explorer of ``outputs.attentions`` (or the model's whole ``outputs``) and its
    tokens, opened on ``layer``.

    ``sentence_b_start``, ``prettify_tokens`` and ``include_layers`` are accepted and not needed: every layer is
    shown, tokens are always cleaned. ``html_action="return"`` returns, as bertviz does, an ``IPython.display.HTML``
    whose ``.data`` is a standalone page (the static display); in a kernel it shows as the explorer (its ``.widget``).
    """
    return _bertviz(attention, tokens, layer, heads, html_action, encoder_attention=encoder_attention,
                    decoder_attention=decoder_attention, cross_attention=cross_attention,
                    encoder_tokens=encoder_tokens, decoder_tokens=decoder_tokens)


def model_view(attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, display_mode="dark",
               encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None,
               decoder_tokens=None, include_layers=None, include_heads=None, html_action="view"):
    """bertviz's ``model_view``: the same explorer, every layer × head in its overview."""
    return _bertviz(attention, tokens, None, None, html_action, encoder_attention=encoder_attention,
                    decoder_attention=decoder_attention, cross_attention=cross_attention,
                    encoder_tokens=encoder_tokens, decoder_tokens=decoder_tokens)


def _trace_bundle(trace):
    """A trace's own display in a notebook: the explorer (static PNGs where anywidget is missing)."""
    try:
        data, meta = explorer(trace)._repr_mimebundle_()
    except ImportError:
        data, meta = static_bundle(trace), {}
    return {**data, "text/plain": repr(trace)}, meta  # a console, or a frontend that shows text only: the trace's summary


def register() -> None:
    """Let a trace display itself as the explorer in a running IPython kernel (a no-op anywhere else)."""
    import sys

    if "IPython" not in sys.modules:
        return
    ip = sys.modules["IPython"].get_ipython()
    if ip is None:
        return
    formatter = ip.display_formatter.mimebundle_formatter
    for cls in (AttentionTrace, Seq2SeqTrace):
        formatter.for_type(cls, _trace_bundle)
