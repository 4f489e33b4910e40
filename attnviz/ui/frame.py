"""The shared frame on every page: model picker, text box, samples, status line, layer and head.

Widget keys ``model``, ``text``, ``layer`` and ``head`` are bound to the URL's query parameters
(``bind="query-params"``), so a copied link reproduces the view.
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from functools import partial
from contextlib import nullcontext
from typing import NamedTuple

import streamlit as st

from attnviz import settings
from attnviz.backends import footprint
from attnviz.backends import DEFAULT_MODEL, causal_model, describe, list_models, load, normalise
from attnviz.backends.cards import takes
from attnviz.backends.packaged import first_load_note
from attnviz.backends.common import chat_kw, check_text
from attnviz.data.samples import ALL_SAMPLES, samples_for
from attnviz.ui import access, collect, heads, jobs, links, uploads
from attnviz.ui.display import MODEBAR_CSS
from attnviz.ui.progress import BAR_CSS
from attnviz.ui.escape import plain
from attnviz.ui.readable import unknown_note
from attnviz.ui.traces import STORE

log = logging.getLogger("attnviz")


# Columns that hold a chart stack once two of them no longer fit side by side (Streamlit itself stacks
# columns only below 640 px of window, so at 800 px a chart beside another was ~90 px wide).
# Charts with a cell or point per head (keys by prefix): a grid keeps a readable width (12 heads at ~22 px with its
# labels and colour bar) and scrolls sideways in a narrower column rather than shrink (a phone's were ~115 px wide,
# their head numbers piled up). Streamlit sizes a chart to its full-screen frame, so the frame takes the minimum.
HEAD_GRIDS = ("overview_", "links_", "edit_grid", "patch_map", "role_grid", "stat_map", "importance_map", "atlas_grid",
              "long_overview", "long_sinks", "long_delims", "corpus_grid_")
GRID_MIN = "30rem"
LAYOUT_CSS = (
    ".stHorizontalBlock:has(> .stColumn .stPlotlyChart) { flex-wrap: wrap; }"
    ".stColumn:has(.stPlotlyChart) { min-width: min(100%, 26rem); }"
    + ", ".join(f'.stElementContainer[class*="st-key-{k}"]' for k in HEAD_GRIDS) + " { overflow-x: auto; }"
    + ", ".join(f'[class*="st-key-{k}"] [data-testid="stFullScreenFrame"]' for k in HEAD_GRIDS)
    + f" {{ min-width: {GRID_MIN}; }}"
    # Less room above the page and its headings, so each page's first figure starts on a 1280×800 screen
    + ".stMainBlockContainer { padding-top: 3rem; }"
    ".stMainBlockContainer h1 { font-size: 2.25rem; padding: 0.5rem 0; }"
    ".stMainBlockContainer h2 { font-size: 1.75rem; padding: 0.5rem 0 0.25rem; }"
    + MODEBAR_CSS  # a phone's chart toolbar in a strip above the chart, clear of its title
)
# A page whose forward runs for seconds (a long text's own path with its own progress: the Attention page's, which puts
# STILL_CSS on the page before it starts) moves nothing on the page while it runs: a browser on the server's machine
# (a laptop demo, the benchmarks) draws every change on the CPU the model needs.
STILL_CSS = (
    # No CSS transitions (the stale fade, the bar's glides and the status widget's fade-in each cost the browser
    # CPU on every change). Stale elements still dim, in one step at Streamlit's 0.5 s.
    "*, *::before, *::after { transition: none !important; }"
    '[data-stale="true"] { transition: opacity 0s 0.5s !important; }'  # the element only: a rule on its descendants
    # made the browser restyle every node of its chart whenever it went stale or fresh
    + BAR_CSS  # the progress bar in the header, and what a Stop leaves shown only once the app no longer runs
)


class Frame(NamedTuple):
    model_key: str  # the model's key in its one spelling (``entered``); ``model`` is its backend
    model: object  # the loaded backend
    text: str
    trace: object  # AttentionTrace or Seq2SeqTrace
    page_cut: bool = False  # this page's cap (ATTNVIZ_PAGE_TOKENS) cut the text short of what the model takes
    chat: bool = False  # the text runs as the user's turn of the model's chat template


def get_model(model_key: str):
    """A loaded model shared by all sessions (stateless; each backend serialises use with its lock): the library's
    one cache of models (``backends.load``, which normalises the key), never a second copy here."""
    return load(model_key)


def max_tokens() -> int:
    """The app's token limit: ATTNVIZ_MAX_TOKENS, else APP_MAX_TOKENS (the library's default is larger); the
    model's own position limit still applies."""
    return settings.max_tokens(settings.APP_MAX_TOKENS)


def page_cap() -> int:
    """How many of a text's first tokens a page other than Attention reads: ATTNVIZ_PAGE_TOKENS, within the app's
    limit (its analyses run on the same tokens as its trace)."""
    return min(settings.page_tokens(), max_tokens())


def _admitted(model, text: str, cap: int):
    """A slot of the job line for a forward over ATTNVIZ_HEAVY_TOKENS tokens, with what its trace will hold;
    a shorter text runs at once."""
    if cap <= settings.heavy_tokens():  # the app's default: no text is long enough, none is tokenised twice
        return nullcontext()
    return jobs.for_tokens(footprint.n_tokens(model, text, cap), partial(footprint.trace_mb, model))


_session_lock = threading.Lock()
def session_models() -> dict:
    """Models that exist for this session only (trained on the Train page): key -> backend."""
    with _session_lock:
        return st.session_state.setdefault("session_models", {})


# A session model's number in the trace store's keys: never reused, where an id() is once its model is freed (another
# session's new model at the same address would find the old one's traces).
_SERIALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_serial_count = itertools.count()


def _serial(model) -> int:
    with _session_lock:
        if model not in _SERIALS:
            _SERIALS[model] = next(_serial_count)
        return _SERIALS[model]


def register_session_model(model_key: str, backend) -> None:
    """Make a freshly built model selectable on every page for this session (a model trained again under the same
    key is a new one: the traces of the one it replaces are forgotten)."""
    old = session_models().get(model_key)
    session_models()[model_key] = backend
    if old is not None:
        gone = _serial(old)
        STORE.drop(lambda k: k[0] == "session" and k[1] == gone)


SESSION = "session:"  # the key prefix of models trained on the Train page, which last as long as their session


def entered(model_key: str) -> str:
    """The picker's model key in its one spelling (``backends.normalise``), made once where it enters the page; a
    key that cannot name a model stays as typed, and opening it refuses it in words."""
    try:
        return normalise(model_key)
    except ValueError:
        return model_key


def resolve(model_key: str):
    """The backend behind a key: this session's own models first, then the shared cache."""
    if model_key in session_models():
        return session_models()[model_key]
    if model_key.startswith(SESSION):
        raise ValueError(f"{model_key} was trained on the Train page in an earlier session, and a model trained there "
                         "lasts only as long as its session (a reload starts a new one). Train it again there")
    return get_model(model_key)


def offered(model_key: str):
    """``resolve`` for a key a visitor gave: refused unless offered; in public mode the reason a model
    could not be opened stays in the server log."""
    access.check_allowed(model_key, model_options())
    try:
        return resolve(model_key)
    except Exception as e:
        if not access.public():
            raise
        log.warning("could not open %r", model_key, exc_info=True)
        raise ValueError(access.open_failed(model_key, e)) from None


def stored_trace(model_key: str, text: str, target: str | None = None, tokens: int | None = None, chat: bool = False,
                 model=None):
    """The trace of ``text`` under model ``model_key`` (its first ``tokens`` tokens at most; ``chat``: in the
    model's chat template), from the trace store (ui/traces.py); a session model's under its backend's identity.
    ``model_key`` is normalised where it entered (the frame's ``entered``); ``model``: its backend, when the caller
    resolved it already (else resolved here, when needed)."""
    cap = max_tokens() if tokens is None else min(tokens, max_tokens())
    own = model_key in session_models()
    if own:
        model = session_models()[model_key] if model is None else model
    k = ("session", _serial(model)) if own else ("cells", model_key)

    def compute():  # a heavy forward waits in line first, under this key's lock only
        backend = get_model(model_key) if model is None else model
        with _admitted(backend, text, cap):
            return backend.trace(text, target, max_tokens=cap, **chat_kw(chat))

    return STORE.make((*k, text, target, cap, chat), compute)


def model_options() -> list[str]:
    base = access.allowed_models() or list_models()  # an operator's allowlist replaces the built-ins
    return base + [k for k in session_models() if k not in base]


def _use_sample():
    samples = samples_for(st.session_state.get("model") or DEFAULT_MODEL)
    name = st.session_state.get("sample")
    if name in samples:
        st.session_state["text"] = samples[name]


def _model_changed() -> None:
    """A sample text the new model cannot read (another model's) becomes the new model's first sample."""
    ours = samples_for(st.session_state.get("model") or DEFAULT_MODEL)
    text = st.session_state.get("text")
    if text in ALL_SAMPLES and text not in ours.values():
        st.session_state["text"] = next(iter(ours.values()))


# The sidebar's upload limit, in MB of 10^6 bytes: a .txt or .md of 2 MB is far more text than 16,384 tokens. Decimal
# because Streamlit 1.67's browser uploader counts a widget's max_upload_size in units of 1000² bytes (1024² on
# Windows only) and refuses more as "File must be 2.0MB or smaller"; this page states that limit in bytes and
# enforces it (a Windows browser lets up to 2 MiB through). server.maxUploadSize, by contrast, is in MiB.
MAX_UPLOAD_MB = 2
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 10**6


def uploaded_text(text: str, notes=st) -> str:
    """The uploaded file's text when there is one (a plain message in ``notes`` when it cannot be read), else
    ``text``."""
    file = st.file_uploader("…or upload a document (.txt, .md)", type=["txt", "md"], key="upload",
                            max_upload_size=MAX_UPLOAD_MB,  # refused in the browser before it is sent
                            help=f"A document of up to {MAX_UPLOAD_MB} MB ({MAX_UPLOAD_BYTES:,} bytes) replaces the "
                                 "text box's text (which takes at most "
                                 f"{access.max_chars():,} characters); links cannot carry it.")
    if file is None:
        return text
    if file.size > MAX_UPLOAD_BYTES:
        notes.error(plain(f"{file.name!r} is {file.size:,} bytes, over the {MAX_UPLOAD_MB} MB ({MAX_UPLOAD_BYTES:,} "
                          "bytes) this page takes. The text box's text is shown instead."))
        return text
    try:
        body = file.getvalue().decode("utf-8")
    except UnicodeDecodeError:
        notes.error(plain(f"{file.name!r} is not UTF-8 text (a binary file?). The text box's text is shown "
                          "instead."))
        return text
    st.caption(f"Showing the uploaded document: {len(body):,} characters. A shared link holds the text box's "
               "text, not the upload.")
    return body


_LAST_TEXT = "text_within_limit"  # session-state key: the text box's last text within the limit
_REFUSED = "text_refused"  # session-state key: the length of a paste the box refused, said once in the main area


def _text_changed() -> None:
    """A paste over the limit is refused whole: the box keeps its text, and the page says so where the user looks
    (the browser used to refuse it, with no word to the server)."""
    text = st.session_state.get("text") or ""
    if len(text) > access.max_chars():
        st.session_state["text"] = st.session_state.get(_LAST_TEXT, "")
        st.session_state[_REFUSED] = len(text)


def sidebar() -> tuple[str, str]:
    """Model picker, samples, text box and upload; returns (model key, text): an uploaded document's text, when
    one is uploaded. What the text box or the upload refused is said at the top of the main area."""
    notes = st.container()
    refused = st.session_state.pop(_REFUSED, None)
    if refused is not None:
        notes.warning(f"The paste of {refused:,} characters is over the {access.max_chars():,} the text box takes, so "
                      "the box keeps its earlier text. A longer document goes in the sidebar's upload, under the "
                      "text box.", icon=":material/content_paste_off:")
    with st.sidebar:
        model_key = st.selectbox(
            "Model",
            model_options(),
            key="model",
            accept_new_options=not access.locked(),
            bind="query-params", on_change=_model_changed,
            help=("The models this demo offers." if access.locked() else
                  "A built-in model, or type a Hugging Face id (hf:gpt2) or a local folder and press Enter.")
                 + "".join(f"\n- `{k}`: {describe(k)}" for k in model_options() if describe(k)),
        )
        if describe(model_key or DEFAULT_MODEL):  # grey Markdown, not a caption: the first caption is the status line
            st.markdown(f":gray[{describe(model_key or DEFAULT_MODEL)}]")
        st.selectbox("Sample text", list(samples_for(model_key or DEFAULT_MODEL)), index=None, key="sample",
                     on_change=_use_sample, placeholder="Choose a sample…", help="Texts this model can read.")
        # The text gets its value one way, through session state (a default beside a value that a page
        # switch or a sample sets makes Streamlit log a warning); a link's text still wins on a first run.
        if "text" not in st.session_state and "text" not in st.query_params:
            st.session_state["text"] = next(iter(samples_for(model_key or DEFAULT_MODEL).values()))
        text = st.text_area(
            "Text", key="text", height=160, bind="query-params", on_change=_text_changed,
            help=f"Press Ctrl+Enter (or click outside) to run. At most {access.max_chars():,} characters: "
                 "a longer paste is refused whole.",
        )
        # Say so before it happens too (in grey Markdown, not a caption: the page's first caption is its status
        # line).
        st.markdown(f":gray[A paste over {access.max_chars():,} characters is refused whole and the box keeps its "
                    "text; a longer document goes in the upload below.]")
        st.session_state[_LAST_TEXT] = text
        text = uploaded_text(text, notes)
    return (model_key or DEFAULT_MODEL), text


def use_app_navigation() -> None:
    """Run every page through app.py's ``st.navigation`` (which names the home page "Home").

    Streamlit treats a ``pages/`` folder as the old multipage mode, naming the home page after its file
    ("app"), until some run calls ``st.navigation``; a visitor who opens /Attention first would never get
    there. One rerun through app.py fixes it for the whole server; it is only ever needed on a session's
    first run (a page load), so no click is lost to it.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        if "page" not in st.session_state:  # set by links.carry_over on every run after the first
            st.rerun()


def chat_option(model) -> bool:
    """The sidebar's "apply the model's chat template" box (bound to the URL), for a model whose tokenizer has
    one; whether it is ticked."""
    if not model.can("chat"):
        return False
    with st.sidebar:
        on = st.checkbox("Apply the model's chat template", key="chat", bind="query-params",
                         help="Run the text as the user's turn of the model's own chat template, ready for its "
                              "answer, as an instruct model is used. The template's tokens show as tokens, and "
                              "hide with the special tokens.")
    links.remember("chat")
    return bool(on)


def frame(title: str, when_long=None, whole: bool = False, chat: bool = False) -> Frame:
    """Render the shared frame and return the model and trace; stops the page with a message on bad input.

    A page draws the first ATTNVIZ_PAGE_TOKENS tokens of a text, cell by cell; ``whole``: every token the app takes
    (the Attention page, which pools a long text).

    ``when_long(model_key, text, chat, model) -> trace | None``: the page's own path for a long text (the Attention
    page's surveyed trace, ui/long.py), with its own progress; None leaves the text to ``stored_trace``.
    ``chat``: the page runs a decoder on a prompt, so it offers the model's chat template (``chat_option``).
    """
    use_app_navigation()
    collect.start()  # Streamlit's own collection is off (.streamlit/config.toml)
    uploads.install()  # uploads bounded per session and in all (public mode), released once a session is gone
    st.set_page_config(page_title=f"attnviz · {title}", page_icon="🔎", layout="wide")
    st.markdown(f"<style>{LAYOUT_CSS}</style>", unsafe_allow_html=True)  # our own constants, no user text
    links.read_link()
    heads.follow_click()
    links.carry_over(title)
    model_key, text = sidebar()
    links.remember("model", "text")
    links.check_link(model_key, model_options()[0], offered)
    model_key = instead_of_refused(entered(model_key))
    cap = None if whole else page_cap()  # the tokens this page reads
    try:
        access.check_allowed(model_key, model_options())
        text = check_text(text)
        if when_long is None:
            with st.spinner(first_load_note(model_key) or f"Loading {model_key} and computing attention…"):
                model = offered(model_key)
                chat = chat and chat_option(model)
                trace = stored_trace(model_key, text, tokens=cap, chat=chat, model=model)
        else:  # the long path shows its own progress: a spinner spinning beside it takes a browser on the server's
            with st.spinner(first_load_note(model_key) or f"Loading {model_key}…"):  # machine CPU the model needs
                model = offered(model_key)
            chat = chat and chat_option(model)
            trace = when_long(model_key, text, chat, model)
            if trace is None:  # not a long text: the frame's own path
                with st.spinner(f"Computing attention of {model_key}…"):
                    trace = stored_trace(model_key, text, tokens=cap, chat=chat, model=model)
    except ValueError as e:
        refuse(model_key, plain(str(e)))
    except Exception as e:  # a fault in a model or library: say so plainly, keep the page alive
        log.exception("trace failed for %s", model_key)
        refuse(model_key, plain(access.fault(model_key, e)))
    st.session_state[_GOOD_MODEL] = model_key
    page_cut = cut_by_page(trace, cap, model.limit(max_tokens()))
    status(trace, page_cut)
    if trace.truncated and not page_cut:
        offer_whole(model_key, trace)
    unknown_note(trace, model_key)
    return Frame(model_key, model, text, trace, page_cut, chat)


def _switch_to(model_key: str) -> None:
    """Set the frame's model (before the next run draws its picker) and fit the sample text to it."""
    st.session_state["model"] = model_key
    _model_changed()


def offer_model(model_key: str, label: str, where=st, why: str = "switch") -> bool:
    """A button that switches the frame's model to ``model_key`` in one click, when it is offered; whether it was.
    ``why`` tells apart two offers of one model on a page (a causal model, one that reads the whole text)."""
    if model_key not in model_options():
        return False
    where.button(label, key=f"{why}_to_{model_key}", on_click=_switch_to, args=(model_key,),
                 icon=":material/swap_horiz:")
    return True


def offer_causal(why: str) -> None:
    """``why`` a page needs a causal language model, and a one-click switch to one (the real decoder when installed)."""
    st.info(plain(why))
    offer_model(causal_model(), f"Switch to {causal_model()}: {describe(causal_model())}")


def offer_whole(model_key: str, trace) -> None:
    """For a text cut to fit ``model_key``'s positions: a one-click switch to a model that takes it whole, when one is
    offered (the real decoder first: trained weights)."""
    first = trace if trace.kind != "encoder-decoder" else trace.encoder
    n = first.n_tokens + trace.truncated
    for other in (causal_model(), "builtin:seed"):
        if other != model_key and (takes(other, max_tokens()) or 0) >= n and offer_model(
                other, f"Read all {n:,} tokens with {other}: {describe(other)}", why="whole"):
            return


def cut_by_page(trace, page_cap: int | None, limit: int) -> bool:
    """Whether a page's ``page_cap`` (None: none) cut ``trace`` short of ``limit``, the most tokens the model takes
    in the app (``model.limit(max_tokens())``): a cap at or above it cuts nothing the model would have read."""
    first = trace if trace.kind != "encoder-decoder" else trace.encoder
    return bool(trace.truncated) and page_cap is not None and first.n_tokens == min(page_cap, limit) < limit


_GOOD_MODEL = "last_good_model"  # session-state key: the last model a page drew
_REFUSED_MODEL = "refused_model"  # session-state key: (model key, why) of the model the picker holds that failed


def refuse(model_key: str, message: str) -> None:
    """Stop the page with ``message`` (plain Markdown); when ``model_key`` is a model entry that failed and another
    model drew the last page, run again with that one instead (``instead_of_refused``), so its figures stay on screen."""
    good = st.session_state.get(_GOOD_MODEL)
    if good is None or good == model_key:
        st.error(message)
        st.stop()
    st.session_state[_REFUSED_MODEL] = (model_key, message)
    st.rerun()


def _back_to(good: str) -> None:
    st.session_state["model"] = good
    st.session_state.pop(_REFUSED_MODEL, None)


def instead_of_refused(model_key: str) -> str:
    """The model the page draws: ``model_key``, or, while the picker holds a model entry that failed, the last good one,
    under the failure's message and a one-click way back to it."""
    refused = st.session_state.get(_REFUSED_MODEL)
    if refused is None or refused[0] != model_key:
        st.session_state.pop(_REFUSED_MODEL, None)
        return model_key
    good = st.session_state[_GOOD_MODEL]
    st.error(refused[1])
    st.button(f"Back to {good}", key="back_to_good_model", on_click=_back_to, args=(good,), icon=":material/undo:",
              help="Puts the model picker back on the last model that worked.")
    st.caption(f"Below: the last good model's figures ({plain(good)}).")
    return good


def status(trace, page_cut: bool = False) -> None:
    """One line: model, kind, token count and what was truncated (by the model's positions, or by this page's cap
    when ``page_cut``)."""
    stacks = [trace] if trace.kind != "encoder-decoder" else [trace.encoder, trace.decoder]
    counts = " → ".join(str(s.n_tokens) for s in stacks)
    line = f"**{plain(trace.model)}** · {trace.kind} · {counts} tokens"
    if page_cut:
        line += (f" · ⚠️ this page reads the first {stacks[0].n_tokens:,} tokens and leaves {trace.truncated:,} out: "
                 "it draws every position cell by cell (ATTNVIZ_PAGE_TOKENS raises it); the Attention page "
                 "explores the whole text")
    elif trace.truncated:
        line += f" · ⚠️ {trace.truncated} tokens cut to fit the model's {stacks[0].n_tokens} positions"
    if trace.capture == "eager":
        line += " · eager attention: attnviz cannot capture this model's attention, so it holds every weight"
    st.caption(line)


def layer_head(n_layers: int, n_heads: int, with_mean: bool = False) -> tuple[int, int | None]:
    """Layer and head pickers (indices from 0, as in Hugging Face outputs), bound to the URL.

    With ``with_mean`` the head picker offers "mean" (returned as None) for the layer's average.
    """
    heads = (["mean"] if with_mean else []) + list(range(n_heads))
    c1, c2 = st.columns(2)
    layer = c1.selectbox("Layer", list(range(n_layers)), key="layer", bind="query-params")
    # A default index beside a value set through session state (an overview click) makes Streamlit warn.
    default = {} if "head" in st.session_state else {"index": 1 if with_mean else 0}
    head = c2.selectbox("Head", heads, key="head", bind="query-params", **default)
    links.check_link_index("layer", layer, n_layers)
    links.check_link_index("head", head, n_heads)
    links.remember("layer", "head")
    return int(layer), (None if head == "mean" else int(head))
