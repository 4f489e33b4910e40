"""Operator settings from environment variables, read at call time so a running app picks up changes."""

from __future__ import annotations

import os


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {raw!r}")
    return value


def allow_pickle() -> bool:
    """ATTNVIZ_ALLOW_PICKLE=1 lets Hugging Face models load from pickle checkpoints (pytorch_model.bin)."""
    return _flag("ATTNVIZ_ALLOW_PICKLE")


def max_model_mb() -> float:
    """ATTNVIZ_MAX_MODEL_MB: the largest weights (in MB on disk) a Hugging Face model may have."""
    return _number("ATTNVIZ_MAX_MODEL_MB", 2048)


LIBRARY_MAX_TOKENS = 32_768
APP_MAX_TOKENS = 512  # the app's pages show every head at once, cell by cell


def max_tokens(default: int = LIBRARY_MAX_TOKENS) -> int:
    """ATTNVIZ_MAX_TOKENS: the most tokens one text may have, whatever the model could take.

    A trace keeps queries and keys, not weights, so its memory grows with the length, not its square;
    the forward's time still grows with the square. The app passes its own default, APP_MAX_TOKENS.
    """
    return int(_number("ATTNVIZ_MAX_TOKENS", default))


LONG_MAX_TOKENS = 16_384  # the Long text page draws pooled maps and windows, never a whole head cell by cell


def max_long_tokens() -> int:
    """ATTNVIZ_MAX_LONG_TOKENS: the most tokens the Long text page takes (the model's position limit still applies)."""
    return int(_number("ATTNVIZ_MAX_LONG_TOKENS", LONG_MAX_TOKENS))


def max_dense_mb() -> float:
    """ATTNVIZ_MAX_DENSE_MB: the most memory ``trace.attentions`` may take for every head at once."""
    return _number("ATTNVIZ_MAX_DENSE_MB", 1024)


def max_new_tokens() -> int:
    """ATTNVIZ_MAX_NEW_TOKENS: how many tokens an encoder–decoder may generate when no target is given."""
    return int(_number("ATTNVIZ_MAX_NEW_TOKENS", 32))


def hub_timeout() -> float:
    """ATTNVIZ_HUB_TIMEOUT: seconds to wait for the Hugging Face hub before calling it unreachable."""
    return _number("ATTNVIZ_HUB_TIMEOUT", 3)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE=1: never contact the Hugging Face hub (models come from folders or the local cache)."""
    return _flag("HF_HUB_OFFLINE")


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
    return int(_number("ATTNVIZ_MAX_HEADS", 1024))


def max_forwards() -> int:
    """ATTNVIZ_MAX_FORWARDS: the most forward passes one analysis may run (head ablation runs one per head)."""
    return int(_number("ATTNVIZ_MAX_FORWARDS", 400))


def max_flows() -> int:
    """ATTNVIZ_MAX_FLOWS: the most max-flow problems attention flow may solve for one view (layers × tokens)."""
    return int(_number("ATTNVIZ_MAX_FLOWS", 1536))


def max_views_mb() -> float:
    """ATTNVIZ_MAX_VIEWS_MB: memory for views derived from traces (display options applied, rollout, statistics),
    shared by all sessions; a session keeps none of its own."""
    return _number("ATTNVIZ_MAX_VIEWS_MB", 256)


def max_jobs() -> int:
    """ATTNVIZ_MAX_JOBS: how many heavy jobs (long forwards, generation, training, ablation, flow) run at once, all
    sessions together; the rest wait in line, each visitor told their place."""
    return int(_number("ATTNVIZ_MAX_JOBS", 2))


def max_train_steps() -> int:
    """ATTNVIZ_MAX_TRAIN_STEPS: the most training steps one session may run, all its trainings together."""
    return int(_number("ATTNVIZ_MAX_TRAIN_STEPS", 2000))


# Corpus mode: where jobs run and what they may keep, environment only (never a visitor's choice).


def ray_address() -> str | None:
    """ATTNVIZ_RAY_ADDRESS: the Ray cluster corpus jobs run on ("auto" or an address); unset: in this process."""
    return os.environ.get("ATTNVIZ_RAY_ADDRESS", "").strip() or None


def corpus_dir() -> str | None:
    """ATTNVIZ_CORPUS_DIR: a folder whose files the Corpus page may read by path (never in public mode)."""
    return os.environ.get("ATTNVIZ_CORPUS_DIR", "").strip() or None


def corpus_work() -> str | None:
    """ATTNVIZ_CORPUS_WORK: where the Corpus page keeps uploads and shards (unset: <tmp>/attnviz-corpus)."""
    return os.environ.get("ATTNVIZ_CORPUS_WORK", "").strip() or None


def corpus_disk_mb() -> float:
    """ATTNVIZ_CORPUS_DISK_MB: the most disk the Corpus page's uploads and shards take, all sessions together."""
    return _number("ATTNVIZ_CORPUS_DISK_MB", 1024)


def shard_write_pause() -> float:
    """ATTNVIZ_TEST_SHARD_PAUSE: seconds a corpus shard's write waits half-written (tests kill it there); 0: none."""
    raw = os.environ.get("ATTNVIZ_TEST_SHARD_PAUSE", "").strip()
    return _number("ATTNVIZ_TEST_SHARD_PAUSE", 0) if raw else 0.0


def heavy_tokens() -> int:
    """ATTNVIZ_HEAVY_TOKENS: a forward over more tokens than this is a heavy job (it waits for a slot of the one line)."""
    return int(_number("ATTNVIZ_HEAVY_TOKENS", 2048))


def max_trace_mb() -> float:
    """ATTNVIZ_MAX_TRACE_MB: memory for traces, all sessions together: what running heavy jobs will hold plus the
    long traces kept. A job starts only while it fits; one that cannot fit alone is refused."""
    return _number("ATTNVIZ_MAX_TRACE_MB", 6144)


def gc_every_s() -> float:
    """ATTNVIZ_GC_EVERY_S: how often the app collects cyclic garbage (a finished page run's variables)."""
    return _number("ATTNVIZ_GC_EVERY_S", 10)
