"""Model keys -> loaded backends. ``builtin:*`` are attnviz's own; anything else goes to Hugging Face."""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager
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
_guard = threading.Lock()  # guards _loading, _models and _REGISTERED
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


MODELS = 4  # models kept loaded, shared by every caller (the app's sessions and pages, the library, the CLI)
_models: dict[str, Backend] = {}  # normalised key -> backend, the least recently used first; guarded by _guard


def _known(key: str) -> bool:
    local = Path(key).expanduser() if key else None  # a folder, or a GGUF file
    return (key in BUILTIN or key in PACKAGED or key.startswith("hf:")
            or bool(local and (local.is_dir() or local.suffix.lower() == ".gguf")))


def _kept(key: str) -> Backend | None:
    with _guard:
        backend = _models.pop(key, None)
        if backend is not None:
            _models[key] = backend  # used last
        return backend


def _open(key: str, keep: bool) -> Backend:
    """The model behind a normalised ``key``; ``keep``: from, and into, the one cache of models (a second load
    of a key waits for the first and finds its model there; a load of another key does not wait)."""
    if _REGISTERED.get(key) is not None:
        return _REGISTERED[key]
    if not _known(key):
        raise ValueError(
            f"Unknown model {key!r}. Known models: {', '.join(list_models())}; "
            "or 'hf:<Hugging Face id, local folder or .gguf file>'."
        )
    _import_transformers()
    with _key_lock(key):
        if keep and (backend := _kept(key)) is not None:
            return backend
        if key in BUILTIN or key in PACKAGED:
            backend = {**BUILTIN, **PACKAGED}[key]()
        else:
            from .hf import load_hf

            backend = load_hf(key.removeprefix("hf:"))
        if keep:
            with _guard:
                _models[key] = backend
                while len(_models) > MODELS:
                    del _models[next(iter(_models))]
        return backend


def open_model(key: str) -> Backend:
    """Load the model behind ``key`` afresh, outside the cache of models: ``builtin:…``, ``hf:<hub id, folder or
    .gguf file>``, or a local folder or .gguf file."""
    return _open(normalise(key), keep=False)


def load(model) -> Backend:
    """The model behind a key, from the one cache of models (the last MODELS used stay loaded): where every key
    enters, normalised here once. A TransformerLens model (an object, not a key) becomes a backend registered under
    ``lens:<its name>`` (``lens:<name>#2`` for a second of that name)."""
    if isinstance(model, str):
        key = normalise(model)
        backend = _kept(key)
        return backend if backend is not None else _open(key, keep=True)
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
