"""Operator settings from environment variables, read at call time so a running app picks up changes.

Every ATTNVIZ_* variable is read here (the app adds its host's secrets as a fallback, ui/access.py). A bad value
has one policy: a warning in the log naming the variable, the value and what is used instead — the setting's
default — and never an error. Settings are read deep inside every request, so raising would turn an operator's
typo into an error on every page for every visitor; the defaults are the bounds a fresh install runs with, so
falling back to one is always safe (a mistyped ATTNVIZ_PUBLIC falls back to public mode, the careful side).
"""

from __future__ import annotations

import logging
import math
import os

log = logging.getLogger("attnviz")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_warned: set = set()  # (name, value) pairs already logged: settings are read on every run of every page


def _raw(name: str, fallback=None) -> str:
    """The variable's value, else ``fallback`` (a host's secret), as stripped text; "" when neither is set."""
    raw = os.environ.get(name, "").strip()
    return raw if raw or fallback is None else str(fallback).strip()


def _bad(name: str, raw: str, wanted: str, instead) -> None:
    if (name, raw) not in _warned:
        _warned.add((name, raw))
        log.warning("%s must be %s, not %r; using %s instead", name, wanted, raw, instead)


def _flag(name: str, default: bool = False, fallback=None, bad: bool | None = None) -> bool:
    """A yes/no setting; an unreadable value gives ``bad`` (default: ``default``)."""
    raw = _raw(name, fallback).lower()
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    if raw:
        instead = default if bad is None else bad
        _bad(name, raw, "one of " + "/".join(_TRUE + _FALSE), "on" if instead else "off")
        return instead
    return default


def _number(name: str, default: float, fallback=None, whole: bool = False, zero: bool = False) -> float:
    """A positive number (``whole``: an integer; ``zero``: 0 allowed too); anything else gives ``default``."""
    raw = _raw(name, fallback)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and (value > 0 or zero and value == 0) and (not whole or value.is_integer()):
        return int(value) if whole else value
    _bad(name, raw, ("a whole number" if whole else "a number") + (" ≥ 0" if zero else " above 0"), default)
    return default


def allow_pickle() -> bool:
    """ATTNVIZ_ALLOW_PICKLE=1 lets Hugging Face models load from pickle checkpoints (pytorch_model.bin)."""
    return _flag("ATTNVIZ_ALLOW_PICKLE")


def max_model_mb() -> float:
    """ATTNVIZ_MAX_MODEL_MB: the largest weights (in MB on disk) a Hugging Face model may have."""
    return _number("ATTNVIZ_MAX_MODEL_MB", 2048)


LIBRARY_MAX_TOKENS = 32_768
APP_MAX_TOKENS = 16_384  # the app's Attention page pools a long text and zooms in; the other pages read PAGE_TOKENS


def max_tokens(default: int = LIBRARY_MAX_TOKENS) -> int:
    """ATTNVIZ_MAX_TOKENS: the most tokens one text may have, whatever the model could take.

    A trace keeps queries and keys, not weights, so its memory grows with the length, not its square;
    the forward's time still grows with the square. The app passes its own default, APP_MAX_TOKENS.
    """
    return _number("ATTNVIZ_MAX_TOKENS", default, whole=True)


PAGE_TOKENS = 512  # what a page that draws every position cell by cell (not the Attention page) reads of a text


def page_tokens() -> int:
    """ATTNVIZ_PAGE_TOKENS: how many of a text's first tokens the pages other than Attention trace and draw; they
    show every position cell by cell, where the Attention page pools a long text and zooms in."""
    return _number("ATTNVIZ_PAGE_TOKENS", PAGE_TOKENS, whole=True)


def max_dense_mb() -> float:
    """ATTNVIZ_MAX_DENSE_MB: the most memory ``trace.attentions`` may take for every head at once."""
    return _number("ATTNVIZ_MAX_DENSE_MB", 1024)


def max_new_tokens() -> int:
    """ATTNVIZ_MAX_NEW_TOKENS: how many tokens an encoder–decoder may generate when no target is given."""
    return _number("ATTNVIZ_MAX_NEW_TOKENS", 32, whole=True)


def hub_timeout() -> float:
    """ATTNVIZ_HUB_TIMEOUT: seconds to wait for the Hugging Face hub before calling it unreachable."""
    return _number("ATTNVIZ_HUB_TIMEOUT", 3)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE=1: never contact the Hugging Face hub (models come from folders or the local cache)."""
    return _flag("HF_HUB_OFFLINE")


def cache_dir() -> str:
    """ATTNVIZ_CACHE_DIR: where attnviz keeps what it derives once and reuses (a GGUF model's dequantised weights);
    unset: attnviz under XDG_CACHE_HOME, else ~/.cache/attnviz."""
    return _raw("ATTNVIZ_CACHE_DIR") or os.path.join(_raw("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "attnviz")


# Budgets, checked before anything is allocated; defaults fit a 2-core, 16 GB host serving a few models at once.


def max_params_m() -> float:
    """ATTNVIZ_MAX_PARAMS_M: the most parameters (millions) a model may have, counted from its config.

    Weights are held as float32, 4 bytes each: 500 M is 2 GB of memory (an fp16 checkpoint doubles).
    """
    return _number("ATTNVIZ_MAX_PARAMS_M", 500)


def max_heads() -> int:
    """ATTNVIZ_MAX_HEADS: the most attention heads (layers × heads, cross-attention included) a model may have.

    Each head adds T² weights to every trace: 1,024 heads at 512 tokens are 1 GB.
    """
    return _number("ATTNVIZ_MAX_HEADS", 1024, whole=True)


def max_forwards() -> int:
    """ATTNVIZ_MAX_FORWARDS: the most forward passes one analysis may run (head ablation runs one per head)."""
    return _number("ATTNVIZ_MAX_FORWARDS", 400, whole=True)


def max_flows() -> int:
    """ATTNVIZ_MAX_FLOWS: the most max-flow problems attention flow may solve for one view (layers × tokens)."""
    return _number("ATTNVIZ_MAX_FLOWS", 1536, whole=True)


def max_views_mb() -> float:
    """ATTNVIZ_MAX_VIEWS_MB: memory for views derived from traces (display options applied, rollout, statistics),
    shared by all sessions; a session keeps none of its own."""
    return _number("ATTNVIZ_MAX_VIEWS_MB", 256)


def max_jobs() -> int:
    """ATTNVIZ_MAX_JOBS: how many heavy jobs (long forwards, generation, training, ablation, flow) run at once, all
    sessions together; the rest wait in line, each visitor told their place."""
    return _number("ATTNVIZ_MAX_JOBS", 2, whole=True)


def max_train_steps() -> int:
    """ATTNVIZ_MAX_TRAIN_STEPS: the most training steps one session may run, all its trainings together."""
    return _number("ATTNVIZ_MAX_TRAIN_STEPS", 2000, whole=True)


# Corpus mode: where jobs run and what they may keep, environment only (never a visitor's choice).


def ray_address() -> str | None:
    """ATTNVIZ_RAY_ADDRESS: the Ray cluster corpus jobs run on ("auto" or an address); unset: in this process."""
    return _raw("ATTNVIZ_RAY_ADDRESS") or None


def corpus_dir() -> str | None:
    """ATTNVIZ_CORPUS_DIR: a folder whose files the Corpus page may read by path (never in public mode)."""
    return _raw("ATTNVIZ_CORPUS_DIR") or None


def corpus_work() -> str | None:
    """ATTNVIZ_CORPUS_WORK: where the Corpus page keeps uploads and shards (unset: <tmp>/attnviz-corpus)."""
    return _raw("ATTNVIZ_CORPUS_WORK") or None


def corpus_disk_mb() -> float:
    """ATTNVIZ_CORPUS_DISK_MB: the most disk the Corpus page's uploads and shards take, all sessions together."""
    return _number("ATTNVIZ_CORPUS_DISK_MB", 1024)


def shard_write_pause() -> float:
    """ATTNVIZ_TEST_SHARD_PAUSE: seconds a corpus shard's write waits half-written (tests kill it there); 0: none."""
    return _number("ATTNVIZ_TEST_SHARD_PAUSE", 0.0, zero=True)


def heavy_tokens() -> int:
    """ATTNVIZ_HEAVY_TOKENS: a forward over more tokens than this is a heavy job (it waits for a slot of the one line)."""
    return _number("ATTNVIZ_HEAVY_TOKENS", 2048, whole=True)


def max_trace_mb() -> float:
    """ATTNVIZ_MAX_TRACE_MB: memory for traces, all sessions together: what running heavy jobs will hold plus the
    long traces kept. A job starts only while it fits; one that cannot fit alone is refused."""
    return _number("ATTNVIZ_MAX_TRACE_MB", 6144)


def warm_mb() -> float:
    """ATTNVIZ_WARM_MB: memory the server keeps touched while idle and hands back right before a heavy forward, whose
    allocations then find pages the host still backs (ui/collect.py); 0, the default: none. An operator's setting
    for a virtual machine whose host takes back free memory; its measured effect is in the docs (Settings)."""
    return _number("ATTNVIZ_WARM_MB", 0, zero=True)


def upload_session_mb() -> float:
    """ATTNVIZ_UPLOAD_SESSION_MB: in public mode, the most one session's uploads may hold in the server's memory
    (the app's own uploaders hold at most a 16 MB corpus file and a 2 MB document)."""
    return _number("ATTNVIZ_UPLOAD_SESSION_MB", 40)


def upload_total_mb() -> float:
    """ATTNVIZ_UPLOAD_TOTAL_MB: in public mode, the most all sessions' uploads together may hold in memory."""
    return _number("ATTNVIZ_UPLOAD_TOTAL_MB", 512)


def gc_every_s() -> float:
    """ATTNVIZ_GC_EVERY_S: how often the app collects cyclic garbage (a finished page run's variables)."""
    return _number("ATTNVIZ_GC_EVERY_S", 10)


# The app's visitors: what they may open and type. ``secret`` is the host's ``[attnviz]`` secret of the same
# name (ui/access.py reads it), used where the variable is unset.

DEFAULT_MAX_CHARS = 20_000


def max_chars(secret=None) -> int:
    """ATTNVIZ_MAX_CHARS: the longest text the app's text box takes."""
    return _number("ATTNVIZ_MAX_CHARS", DEFAULT_MAX_CHARS, secret, whole=True)


def allowed_models(secret=None) -> list[str] | None:
    """ATTNVIZ_MODELS (a comma list; the secret may be a list): the only models offered; None: any."""
    raw = _raw("ATTNVIZ_MODELS") or secret
    items = raw.split(",") if isinstance(raw, str) else raw or []
    return [k for k in (str(i).strip() for i in items) if k] or None


def public(secret=None) -> bool:
    """ATTNVIZ_PUBLIC: public mode (visitors choose only among offered models); unset, it is on by itself on
    Hugging Face Spaces (which sets SPACE_ID). A value neither on nor off gives public mode."""
    return _flag("ATTNVIZ_PUBLIC", bool(_raw("SPACE_ID")), secret, bad=True)
