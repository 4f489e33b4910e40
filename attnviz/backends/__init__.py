"""Model keys -> loaded backends. ``builtin:*`` are attnviz's own; anything else goes to Hugging Face."""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from .builtin import BUILTIN
from .cards import describe
from .common import Backend, check_text, encode
from .packaged import PACKAGED, SMOLLM2

DEFAULT_MODEL = "builtin:minilm"
# transformers' lazy module is not thread-safe: two sessions opening their first models at once got "cannot
# import name 'AutoConfig'". Its imports run once, under this lock; loads then wait only for their own key.
_importing = threading.Lock()
_imported = False
_guard = threading.Lock()  # guards _loading
_loading: dict[str, list] = {}  # model key -> [its lock, how many threads hold or wait for it]
# Models loaded as objects (a TransformerLens model), by the key pages and links name them with: kept until the
# process ends, as the user's own object is.
_REGISTERED: dict[str, Backend] = {}


MAX_KEY = 1024  # characters in a model key: past any hub id (96 a part) or folder path a person types
MAX_PART = 255  # characters between two slashes: longer, and the file system answers OSError (Errno 36)
KEY_FORMS = "'builtin:minilm', 'hf:<Hugging Face id>' or the path of a model folder"


def normalise(key: str) -> str:
    """The one spelling of a model key that caches use: ``" hf: gpt2 "`` and ``"hf:gpt2"`` are one model.

    A key that cannot name a model (not text, or longer than any name) is refused here, where every key enters."""
    if key is not None and not isinstance(key, str):
        raise ValueError(f"A model name is text ({KEY_FORMS}), not {type(key).__name__} {key!r:.40}.")
    key = (key or "").strip()
    if len(key) > MAX_KEY or any(len(part) > MAX_PART for part in key.split("/")):
        raise ValueError(f"This model name is {len(key):,} characters long; a model name ({KEY_FORMS}) has at "
                         f"most {MAX_KEY:,} characters, and at most {MAX_PART} between two slashes.")
    return "hf:" + key[3:].strip() if key.startswith("hf:") else key


def list_models() -> list[str]:
    """The built-in model keys, default first, then the real pretrained models whose wheels are installed."""
    return [*BUILTIN, *PACKAGED]


def causal_model() -> str:
    """The causal LM a page that needs one offers: the real decoder when installed, else builtin:lm."""
    return SMOLLM2 if SMOLLM2 in PACKAGED else "builtin:lm"


def _import_transformers() -> None:
    """Import what every loader reaches for, once, before any two loads can race on transformers' lazy module."""
    global _imported
    with _importing:
        if _imported:
            return
        import transformers
        from transformers.models.auto import configuration_auto, modeling_auto  # noqa: F401

        for name in ("AutoConfig", "AutoTokenizer", "AutoModel", "AutoModelForCausalLM", "AutoModelForSeq2SeqLM",
                     "PreTrainedTokenizerFast"):
            getattr(transformers, name)
        _imported = True


@contextmanager
def _key_lock(key: str):
    """Held while ``key`` loads: a second load of the same key waits, a load of another key does not."""
    with _guard:
        entry = _loading.setdefault(key, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _guard:
            entry[1] -= 1
            if not entry[1]:  # the table holds only keys being loaded now
                del _loading[key]


def open_model(key: str) -> Backend:
    """Load the model behind ``key`` (uncached): ``builtin:…``, ``hf:<hub id, folder or .gguf file>``, or a local
    folder or .gguf file."""
    key = normalise(key)
    if _REGISTERED.get(key) is not None:
        return _REGISTERED[key]
    local = Path(key).expanduser() if key else None  # a folder, or a GGUF file
    if (key in BUILTIN or key in PACKAGED or key.startswith("hf:")
            or (local and (local.is_dir() or local.suffix.lower() == ".gguf"))):
        _import_transformers()
        with _key_lock(key):
            if key in BUILTIN or key in PACKAGED:
                return {**BUILTIN, **PACKAGED}[key]()
            from .hf import load_hf

            return load_hf(key.removeprefix("hf:"))
    raise ValueError(
        f"Unknown model {key!r}. Known models: {', '.join(list_models())}; "
        "or 'hf:<Hugging Face id, local folder or .gguf file>'."
    )


@lru_cache(maxsize=4)
def _load(key: str) -> Backend:
    return open_model(key)


def load(model) -> Backend:
    """``open_model`` with the last few models kept in memory. A TransformerLens model (an object, not a key)
    becomes a backend registered under ``lens:<its name>`` (``lens:<name>#2`` for a second of that name)."""
    if isinstance(model, str):
        return _load(normalise(model))
    from .lens import LensBackend, name_of

    with _guard:
        known = next((b for b in _REGISTERED.values() if b is not None and b.net is model), None)
        if known is not None:
            return known
        key = name_of(model)
        key = next(k for k in (key if n < 2 else f"{key}#{n}" for n in itertools.count(1)) if k not in _REGISTERED)
        _REGISTERED[key] = None  # taken while the model is checked
    try:
        backend = LensBackend(model, key)
    except BaseException:
        with _guard:
            del _REGISTERED[key]
        raise
    with _guard:
        _REGISTERED[key] = backend
    return backend


__all__ = ["DEFAULT_MODEL", "Backend", "list_models", "causal_model", "describe", "normalise", "open_model", "load",
           "check_text", "encode"]
