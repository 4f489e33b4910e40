"""The link that reproduces a view: its parameters read and checked, the notes on what it could not carry, and the
shared widgets' values carried from page to page (this module alone reads and writes them).

The frame binds the shared widgets (``LINK_KEYS``) to the URL. Streamlit drops a link's
invalid values without a word, so a session's first run keeps the raw query parameters
(``read_link``) and the frame compares them with what its widgets ended up with.
"""

from __future__ import annotations

import math
from urllib.parse import urlencode, urlsplit

import streamlit as st

from attnviz.ui.access import max_chars, public
from attnviz.ui.escape import code

LINK_KEYS = ("model", "text", "layer", "head", "chat")  # the shared widgets, bound to the URL on every page
_LINK = "_link"  # session-state key of the link's raw parameters and pending fallback
DROPPED = "link_dropped"  # stands for a query string Streamlit dropped whole (install)
_SAVED = "shared_values"  # session-state key of the shared widgets' values, kept for the next page


def note(message: str) -> None:
    """A warning about the link; quote anything taken from the link with ``code``."""
    st.warning(message, icon=":material/link:")  # a font icon: no emoji font needed


def install() -> None:
    """Have a query string Streamlit drops whole (over its 512 Ki characters or 1,000 parameters, with only a line in
    the server log) arrive as one parameter, DROPPED, saying how long it was, so the page can say why none of the
    link was used. Called as the server starts (``python -m attnviz.ui.serve``) and at every page run."""
    from streamlit.runtime import app_session
    from streamlit.runtime.state.query_params import sanitize_query_string

    if getattr(app_session.sanitize_query_string, "attnviz", False):
        return

    def marked(query_string: str) -> str:
        kept = sanitize_query_string(query_string)
        if query_string and not kept:
            return f"{DROPPED}={len(query_string)}.{query_string.count('&') + 1}"  # characters.parameters
        return kept

    marked.attnviz = True
    app_session.sanitize_query_string = marked


def _over_limit() -> str | None:
    """Why Streamlit ignored this run's whole query string (too long, too many parameters), or None."""
    from streamlit.runtime.state import query_params as qp

    longest = getattr(qp, "CLIENT_STATE_QUERY_STRING_MAX_LENGTH", 512 * 1024)
    most = getattr(qp, "CLIENT_STATE_QUERY_STRING_MAX_FIELDS", 1000)
    size = st.query_params.get(DROPPED)
    if size is None:  # not marked: a run handed its query string whole (AppTest) may still be over the limits
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        raw = getattr(get_script_run_ctx(), "query_string", "") or ""
        size = f"{len(raw)}.{raw.count('&') + 1}"
    else:
        st.query_params.pop(DROPPED)  # out of the address: the link it stood for is gone
    chars, _, fields = size.partition(".")
    if not (chars.isdigit() and fields.isdigit()) or int(chars) <= longest and int(fields) <= most:
        return None
    if int(chars) > longest:
        return f"{int(chars):,} characters, over the {longest:,} Streamlit reads"
    return f"{int(fields):,} parameters, over the {most:,} Streamlit reads"


def read_link() -> None:
    """Call at the top of every run: keeps a new session's raw link parameters and applies a fallback."""
    install()
    link = st.session_state.get(_LINK)
    if link is None:
        raw = {k: st.query_params.get_all(k) for k in {*LINK_KEYS, *st.query_params.keys()} - {DROPPED}}  # pages' keys too
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


def carry_over(title: str) -> None:
    """Restore the shared widgets after a page switch, which drops the URL's query string.

    Widgets are per page, so the new page's ones would start at their defaults without this.
    """
    saved = st.session_state.setdefault(_SAVED, {})
    if st.session_state.get("page") not in (None, title):
        for k in LINK_KEYS:
            if k in saved and k not in st.query_params:
                st.session_state[k] = saved[k]
    st.session_state["page"] = title


def remember(*keys: str) -> None:
    """Keep the shared widgets' current values for the next page."""
    saved = st.session_state.setdefault(_SAVED, {})
    saved.update({k: st.session_state[k] for k in keys if k in st.session_state})
