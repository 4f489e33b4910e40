"""Share and export: the link that reproduces a view, download buttons, notes on links, operator settings.

The frame binds ``model``, ``text``, ``layer`` and ``head`` to the URL. Streamlit drops a link's
invalid values without a word, so a session's first run keeps the raw query parameters
(``read_link``) and the frame compares them with what its widgets ended up with.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlencode, urlsplit

import streamlit as st

from attnviz import export, settings

LINK_KEYS = ("model", "text", "layer", "head")
_LINK = "_link"  # session-state key of the link's raw parameters and pending fallback


def _secret(name: str):
    """``[attnviz] name`` from .streamlit/secrets.toml (or the host's secrets), None when unset."""
    try:
        return st.secrets.get("attnviz", {}).get(name)
    except FileNotFoundError:  # no secrets file at all
        return None


def allowed_models() -> list[str] | None:
    """ATTNVIZ_MODELS (comma list) or secrets ``[attnviz] models``: the only models offered; None: any."""
    return settings.allowed_models(_secret("models"))


def public() -> bool:
    """Public mode: the app faces visitors it does not know, so they choose only among offered models.

    On with ATTNVIZ_PUBLIC=1 or secrets ``[attnviz] public = true``, and by itself on Hugging Face Spaces
    (which sets SPACE_ID); ATTNVIZ_PUBLIC=0 turns it off there. Off for a local ``streamlit run app.py``.
    """
    return settings.public(_secret("public"))


def locked() -> bool:
    """Visitors pick from a fixed list (public mode, or an operator's allowlist); no typed model keys."""
    return public() or allowed_models() is not None


def open_failed(key: str, error: Exception) -> str:
    """Why model ``key`` could not be opened; in public mode only that it could not, since the reasons
    can name the server's paths and tell which of its files exist."""
    if public():
        return f"The model {code(key)} could not be opened here."
    return str(error)


def fault(key: str, error: Exception) -> str:
    """What a visitor is told when model ``key`` fails unexpectedly (the server log keeps the traceback)."""
    if public():
        return f"Could not run {key}; the server's log has the details."
    return f"Could not run {key}: {type(error).__name__}: {error}"


def max_chars() -> int:
    """ATTNVIZ_MAX_CHARS or secrets ``[attnviz] max_chars``: the longest text the text box takes."""
    return settings.max_chars(_secret("max_chars"))


def check_allowed(key: str, options: list[str]) -> None:
    """A ValueError when models are locked (public mode, allowlist) and ``key`` is not among ``options``.

    Nothing is looked up for such a key; in public mode the message does not even repeat it, so every
    refused key (a path, a file, nothing) reads the same.
    """
    if locked() and key not in options:
        named = "That model" if public() else f"Model {code(key)}"
        raise ValueError(f"{named} is not offered here; choose one of: {', '.join(options)}.")


# What makes links, emphasis, code, HTML, LaTeX or Streamlit's :colour[…] directives in Markdown.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~$#])")
# What GitHub-flavoured Markdown turns into a link by itself, even with every character escaped: a URL
# with a scheme, a "www." address, an e-mail address. These go into a code span instead.
_AUTOLINK = re.compile(r"(?i)(?:\b[a-z][a-z0-9+.-]*://|\bwww\.)[^\s'\"<>`]*[^\s'\"<>`.,;:!?)]"
                       r"|[-.\w+]+@[-\w]+(?:\.[-\w]+)+")


def plain(message) -> str:
    """``message`` shown as typed in Streamlit's Markdown (st.error, st.warning, st.markdown, captions).

    The one way text from a visitor, a link or an exception reaches a message: nothing in it can become
    a link, an image, markup or formatting.
    """
    text, out, at = str(message), [], 0
    for m in _AUTOLINK.finditer(text):
        out += [_MARKDOWN.sub(r"\\\1", text[at:m.start()]), code(m.group())]
        at = m.end()
    return "".join(out + [_MARKDOWN.sub(r"\\\1", text[at:])])


def code(value) -> str:
    """``value`` safe in Markdown: as is when it is a plain word or number (``99``, ``no-such-model``),
    else a code span, so whatever a crafted link holds shows as typed, never as a link, an image or
    formatting (a fence longer than any run of backticks inside keeps the span closed)."""
    text = " ".join(str(value).split())
    if re.fullmatch(r"[A-Za-z0-9.+-]+", text) and "www." not in text.lower():  # "www." would autolink
        return text
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def note(message: str) -> None:
    """A warning about the link; quote anything taken from the link with ``code``."""
    st.warning(message, icon=":material/link:")  # a font icon: no emoji font needed


def _over_limit() -> str | None:
    """Why Streamlit ignored this run's whole query string (too long, too many parameters), or None."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx
    from streamlit.runtime.state import query_params as qp

    ctx = get_script_run_ctx()
    raw = getattr(ctx, "query_string", "") or ""
    longest = getattr(qp, "CLIENT_STATE_QUERY_STRING_MAX_LENGTH", 512 * 1024)
    most = getattr(qp, "CLIENT_STATE_QUERY_STRING_MAX_FIELDS", 1000)
    if len(raw) > longest:
        return f"{len(raw):,} characters, over the {longest:,} Streamlit reads"
    if raw.count("&") + 1 > most:
        return f"{raw.count('&') + 1:,} parameters, over the {most:,} Streamlit reads"
    return None


def read_link() -> None:
    """Call at the top of every run: keeps a new session's raw link parameters and applies a fallback."""
    link = st.session_state.get(_LINK)
    if link is None:
        raw = {k: st.query_params.get_all(k) for k in {*LINK_KEYS, *st.query_params.keys()}}  # pages' own keys too
        st.session_state[_LINK] = {"raw": raw, "fresh": True}
        if why := _over_limit():  # Streamlit dropped the whole link without a word
            note(f"This link has {why}, so none of it could be used; showing the default view.")
        return
    if "fix" in link:  # the rerun fall_back asked for: set the widget before it is drawn, then say why
        for name, value in link.pop("fix").items():
            st.session_state[name] = value
            if name == "model":  # the picker's default: leaves the address, as a dropped layer=99 does
                _drop_param(name)
        for message in link.pop("notes"):
            note(message)
    else:
        link["fresh"] = False


def _drop_param(name: str) -> None:
    """Remove a widget's parameter from the address: ``st.query_params`` refuses while a widget is bound to it, so
    this goes the way Streamlit drops a bound tab's stale value (st.tabs)."""
    from streamlit.runtime.state import get_session_state

    with get_session_state().query_params() as params:
        params.remove_param(name)


def _fragment_rerun() -> bool:
    """Whether this run reruns a fragment only (a zoom on the Attention page's long view): the run that drew the
    page around it checked the link, and the fragment's widgets since moved away from it."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    return bool(getattr(get_script_run_ctx(), "fragment_ids_this_run", None))


def _raw(name: str) -> list[str]:
    """The link's values for ``name``, only while the session is still showing that link (its first full run)."""
    link = st.session_state.get(_LINK, {})
    return link["raw"].get(name, []) if link.get("fresh") and not _fragment_rerun() else []


def _fall_back(name: str, value, message: str) -> None:
    """Rerun with widget ``name`` set to ``value``: on a first run the URL would win over session state."""
    link = st.session_state[_LINK]
    link.update(fix={name: value}, notes=[message], fell_back=True)
    st.rerun()


def check_link(key: str, default: str, load) -> None:
    """Notes on the link's repeated keys, model and text; a model it names that ``load`` cannot open
    makes the frame fall back to ``default``."""
    for name in LINK_KEYS:
        values = _raw(name)
        if len(values) > 1:
            shown = "" if name == "text" else f" ({', '.join(map(code, values))})"
            note(f"The link gives {name} {len(values)} times{shown}; using the last one.")
    model = _raw("model")
    if model and not st.session_state[_LINK].get("fell_back"):
        if model[-1] != key:  # Streamlit dropped it: not among the picker's options
            named = "" if public() else f" {code(model[-1])}"
            note(f"The link's model{named} is not offered here; showing {key}.")
        else:
            try:
                with st.spinner(f"Loading {key}…"):
                    load(key)
            except Exception as e:  # unknown key, missing files, a hub error: all mean "not this model"
                why = "" if public() else f": {code(str(e).rstrip('.'))}"  # the note adds its own full stop
                _fall_back("model", default, f"The link's model {code(key)} could not be opened{why}. "
                                             f"Showing {default}.")
    text, limit = _raw("text"), max_chars()
    if text and len(text[-1]) > limit and len(st.session_state.get("text") or "") > limit:  # the box takes no more
        _fall_back("text", text[-1][:limit], f"The link's text has {len(text[-1]):,} characters; this app takes at "
                                             f"most {limit:,}, so only the first {limit:,} are used.")


def check_link_index(name: str, value, count: int) -> None:
    """A note when the link's ``name`` ("layer" or "head") was dropped: not a whole number or out of range."""
    raw = _raw(name)
    if not raw or raw[-1] == str(value):
        return
    asked = raw[-1]
    model = st.session_state.get("model") or "this model"
    try:
        index = int(asked)
    except ValueError:
        index = None
    if index is None:
        reason = "is not a whole number"
    elif 0 <= index < count:
        reason = f"is not one of 0–{count - 1}"  # e.g. "03": Streamlit matches the option's text exactly
    else:
        reason = f"is out of range for {model} (0–{count - 1})"
    note(f"{name.capitalize()} {code(asked[:40])} in the link {reason}; showing {name} {value}.")


def _number(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else str(value)


def _same(raw: str, value) -> bool:
    try:
        return float(raw) == float(value)
    except (TypeError, ValueError):
        return raw == str(value)


def check_link_value(name: str, value, label: str, allowed: str) -> None:
    """A note when the link's ``name`` (a page's own widget, shown as ``label``) was dropped: ``allowed`` says
    what the widget takes, ``value`` is what it shows instead."""
    raw = _raw(name)
    if raw and not _same(raw[-1], value):
        note(f"{label}: {code(raw[-1][:40])} in the link is not {allowed}; showing {code(_number(value))}.")


def _forget_link_value(name: str) -> None:
    """Take ``name`` out of the address and out of the link Streamlit seeds a new widget from (kept apart from
    ``st.query_params``; Streamlit 1.67 has no public way to drop it)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    st.query_params.pop(name, None)
    state = getattr(get_script_run_ctx().session_state, "_state", None)
    getattr(getattr(state, "query_params", None), "_initial_query_params", {}).pop(name, None)


def _finite(raw: str) -> bool:
    try:
        return math.isfinite(float(raw))
    except ValueError:
        return True  # not a number at all: the widget drops it and the note says so


def linked_number(where, label: str, low, high, key: str, **options):
    """``where.number_input`` bound to the link, with a note when the link's value was not a number in its range.
    A non-finite value (``inf``, ``1e309``) leaves the address before the widget reads it, as it cannot hold one."""
    raw = _raw(key)
    if raw and not _finite(raw[-1]):
        _forget_link_value(key)
    value = where.number_input(label, low, high, key=key, bind="query-params", **options)
    kind = "a whole number" if isinstance(low, int) else "a number"
    check_link_value(key, value, label, f"{kind} from {_number(low)} to {_number(high)}")
    return value


def link(**state) -> str:
    """This view's full address: the page's URL with its query parameters, ``state`` overriding them."""
    params = {k: str(v) for k, v in state.items() if v is not None}
    params |= {k: v for k, v in st.query_params.to_dict().items() if k not in params}
    base = st.context.url or ""
    if base and not urlsplit(base).path:
        base += "/"  # the home page's address comes without its slash
    return f"{base}?{urlencode(params)}"


def chart_config(name: str, key: str = "share") -> dict:
    """``st.plotly_chart(config=…)``: the toolbar's camera saves ``name``.png (or .svg, as picked in
    ``downloads(key=key)``) at twice the screen resolution."""
    fmt = st.session_state.get(f"{key}_image_format", "PNG").lower()
    return {"toImageButtonOptions": {"format": fmt, "filename": name, "scale": 2}, "displaylogo": False}


def downloads(trace, fig, layer: int, head: int | None, stack: str = "encoder", key: str = "share") -> None:
    """The "Share and export" box under a figure: a link to this view and the files behind it.

    Files are built only when their button is clicked. ``stack`` picks the encoder, decoder or cross
    attention of an encoder–decoder trace; give each box on a page its own ``key``.
    """
    name = export.figure_name(trace.model, layer, head, "" if stack == "encoder" else stack)
    stem = export.file_stem(trace.model)
    with st.expander("Share and export"):
        st.caption("A link to this view (the button at its right copies it):")
        head_param = "mean" if head is None else head
        st.code(link(model=trace.model, text=trace.text, layer=layer, head=head_param), language=None, wrap_lines=True)
        st.radio("The camera button in the chart's toolbar saves", ["PNG", "SVG"], key=f"{key}_image_format",
                 horizontal=True)
        c1, c2, c3, c4 = st.columns(4)
        c1.download_button("This head (CSV)", lambda: export.matrix_csv(*export.head_matrix(trace, layer, head, stack)),
                           f"{name}.csv", "text/csv", key=f"{key}_head_csv", on_click="ignore")
        c2.download_button("Head statistics (CSV)", lambda: export.stats_csv(trace), f"{stem}_heads.csv",
                           "text/csv", key=f"{key}_stats_csv", on_click="ignore")
        c3.download_button("Whole trace (.npz)", lambda: export.to_npz(trace), f"{stem}.npz",
                           "application/octet-stream", key=f"{key}_npz", on_click="ignore")
        c4.download_button("Figure (HTML)", lambda: export.figure_html(fig), f"{name}.html", "text/html",
                           key=f"{key}_html", on_click="ignore",
                           help="A standalone page with plotly.js inside (~5 MB): opens offline, zooms and hovers.")
