"""Which heads do what in a long context: retrieval, streaming, sinks and sparse patterns, each against a null.

A user with a long text asks which heads fetch from far back, which only read the first tokens and a local window
(and could keep a small cache), where the sinks are, and what sparse mask each head follows. The literature
defines each; this module scores them on needle-in-a-haystack probes the model decodes greedily itself:

- retrieval (Wu et al. 2024, *Retrieval Head Mechanistically Explains Long-Context Factuality*): at each greedy
  step, a head hits when its most attended key lies in the needle and holds the token generated; each needle
  token counts once, 1/|needle| per hit. The needle here is the answer's tokens (a code the question asks for).
- streaming (Xiao et al. 2024, *DuoAttention*): 1 − the attention mass a query keeps when restricted to the first
  SINK tokens and the WINDOW most recent ones, averaged over queries: 0 = the head loses nothing when streamed.
- sink (Gu et al. 2024, *When Attention Sink Emerges in Language Models*): mass on the first SINK tokens averaged
  over queries; a sink head when over SINK_THRESHOLD.
- patterns (Jiang et al. 2024, *MInference*): the mass each pattern's mask keeps at one budget of keys a query:
  A-shape (the first block and a recent window), vertical-slash (the columns and diagonals that hold the most
  mass on the last block of queries, MInference's estimate), block-sparse (the key blocks holding the most mass,
  per query block). The pattern keeping the most, ``dense`` when none keeps DENSE_BELOW.

Nulls, so a real head stands apart from chance: retrieval's is the same probe with the needle's tokens replaced by
random tokens of the haystack (decoded and scored alike); sink's and streaming's keep the same number of keys at
random positions instead of the first and recent ones. Each ``*_null_hi`` is the upper end of a 95% bootstrap
interval of the null's mean. Mass scores read a sample of query blocks a layer at a time (``Weights.tile``), so a
16,384-token probe costs its forward plus a few hundred rows per layer, never L·H·T² floats.

Pure scoring here; ``head_atlas`` and ``knockout_recall`` take a loaded backend (duck-typed: ``generate``,
``trace``, ``run_with_trace``, ``tokenizer``), and the face (``attnviz.head_atlas``) loads it from a model key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from ..data import sentences

SINK = 4  # the first tokens a streaming cache keeps (StreamingLLM's 4 sinks)
WINDOW = 64  # the recent tokens a streaming cache keeps
RETRIEVAL_MIN = 0.1  # Wu et al. call a head a retrieval head from this score on
SINK_THRESHOLD = 0.3  # Gu et al.'s ε: a sink head puts more than this on the first tokens
STREAMING_MAX = 0.1  # a head that loses at most this when streamed can keep a sink + window cache
BLOCK = 64  # MInference's block of queries and keys
BUDGET = 1 / 8  # the keys a pattern may keep, as a share of the probe's length (at least 2 blocks)
DENSE_BELOW = 0.9  # a head whose best pattern keeps less than this is "dense"
MIN_TOKENS = 64  # the shortest probe: a haystack around the needle and the question
QUERY_BLOCKS = 8  # query blocks each probe's mass scores read, spread over the last three quarters
BOOTSTRAP = 1000
PATTERNS = ("a-shape", "vertical-slash", "block-sparse")
ROLES = ("retrieval", "sink", "streaming", "full")  # the class each head is shown in, first that applies
NEEDLE = " The secret code is {code}."
QUESTION = "\n\nWhat is the secret code? The secret code is"
CODE_DIGITS = 7
KNOCKOUT_K = 10
REFERENCES = {
    "retrieval": "Wu et al. 2024, *Retrieval Head Mechanistically Explains Long-Context Factuality*",
    "streaming": "Xiao et al. 2024, *DuoAttention: Efficient Long-Context LLM Inference with Retrieval and "
                 "Streaming Heads*",
    "sink": "Gu et al. 2024, *When Attention Sink Emerges in Language Models: An Empirical View*",
    "pattern": "Jiang et al. 2024, *MInference 1.0: Accelerating Pre-filling for Long-Context LLMs via Dynamic "
               "Sparse Attention*",
}


# ---- pure scores on given attention ----------------------------------------------------------------------------

def retrieval_hits(top: np.ndarray, tokens, generated, needle: tuple[int, int]) -> np.ndarray:
    """(H, |needle|) bool: needle token j was copied by head h, i.e. at some step the head's most attended key
    ``top[h, s]`` was needle position j and that key's token is ``generated[s]`` (Wu et al.'s copy-paste)."""
    start, stop = needle
    top = np.asarray(top)  # (H, S)
    hits = np.zeros((top.shape[0], stop - start), bool)
    for at, token in zip(top.T, generated):  # (H,) each head's most attended key at one step
        inside = (at >= start) & (at < stop)
        for h in np.flatnonzero(inside):
            if tokens[at[h]] == token:
                hits[h, at[h] - start] = True
    return hits


def near(positions: np.ndarray, n_keys: int, width: int, causal: bool) -> np.ndarray:
    """(n, Tk) bool: the ``width`` keys nearest each query: the recent ones (itself included) for a causal head,
    the ones around it for a bidirectional one."""
    p = np.asarray(positions)[:, None]  # (n, 1)
    j = np.arange(n_keys)[None, :]  # (1, Tk)
    if causal:
        return (j <= p) & (j > p - width)
    return np.abs(j - p) <= width // 2


def seen(positions: np.ndarray, n_keys: int, causal: bool) -> np.ndarray:
    """(n, Tk) bool: the keys each query may attend to."""
    j = np.arange(n_keys)[None, :]
    return j <= np.asarray(positions)[:, None] if causal else np.ones((len(positions), n_keys), bool)


class Masks(NamedTuple):
    """The keys each pattern keeps for one block of query rows, (n, Tk) each: made once per block, read by every
    layer."""

    stream: np.ndarray  # the first SINK keys and the WINDOW nearest
    sink_null: np.ndarray  # as many keys as the sink mask holds, at random among those the query sees
    stream_null: np.ndarray  # as many as the streaming mask holds, at random
    a_shape: np.ndarray  # the first block and the budget's nearest keys
    diagonal: np.ndarray  # (n, Tk) int: each key's diagonal (``offsets``)


def masks(positions, n_keys: int, causal: bool, rng: np.random.Generator, budget: int, sink: int = SINK,
          window: int = WINDOW, block: int = BLOCK) -> Masks:
    """The masks of query ``positions`` (n,) over ``n_keys`` keys; the nulls' keys drawn from ``rng``."""
    positions = np.asarray(positions)
    n = len(positions)
    draw = rng.random((n, n_keys))  # first: a test redraws the nulls from the same seed
    first = np.arange(n_keys)[None, :] < sink  # (1, Tk)
    stream = near(positions, n_keys, window, causal) | first
    may = seen(positions, n_keys, causal)  # (n, Tk)
    order = np.where(may, draw, np.inf).argsort(-1)  # (n, Tk) the keys the query sees first, shuffled
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(n_keys), (n, n_keys)), -1)  # each key's place in the draw
    a_shape = near(positions, n_keys, budget - block, causal)
    a_shape[:, :block] = True
    return Masks(stream, rank < np.minimum(sink, may.sum(-1))[:, None], rank < (stream & may).sum(-1)[:, None],
                 a_shape, offsets(positions, n_keys))


def kept(w: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(H, n): the mass of rows ``w`` (H, n, Tk) on ``mask`` (n, Tk)."""
    return np.einsum("hnk,nk->hn", w, mask.astype(w.dtype))


def mass_scores(w: np.ndarray, m: Masks, sink: int = SINK) -> dict[str, np.ndarray]:
    """Per head and query row (H, n) of rows ``w`` (H, n, Tk): ``sink`` (mass on the first ``sink`` keys),
    ``streaming`` (1 − mass on the first ``sink`` and the ``window`` nearest keys), and their nulls: the same
    numbers of keys at random positions among those the query sees."""
    return {"sink": w[:, :, :sink].sum(-1), "streaming": 1.0 - kept(w, m.stream),
            "sink_null": kept(w, m.sink_null), "streaming_null": 1.0 - kept(w, m.stream_null)}


def budget_of(n_keys: int, block: int = BLOCK, share: float = BUDGET) -> int:
    """The keys a pattern may keep for each query in a probe of ``n_keys`` keys."""
    return max(2 * block, int(round(n_keys * share)))


def a_shape_kept(w: np.ndarray, m: Masks) -> np.ndarray:
    """(H, n): the mass of the first block of keys plus the budget's nearest ones."""
    return kept(w, m.a_shape)


def offsets(positions, n_keys: int) -> np.ndarray:
    """(n, Tk) each key's diagonal: query position − key position, shifted by Tk so that every index is ≥ 0."""
    return np.asarray(positions)[:, None] - np.arange(n_keys)[None, :] + n_keys


def vertical_slash_choice(w: np.ndarray, positions, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(columns (H, V), diagonals (H, V)): the ``budget // 2`` key columns and the ``budget // 2`` diagonals that
    hold the most mass over rows ``w`` (H, n, Tk): MInference estimates them on the last block of queries."""
    H, n, Tk = w.shape
    v = min(budget // 2, Tk)
    columns = np.argsort(-w.sum(1), -1, kind="stable")[:, :v]  # (H, V)
    diag = offsets(positions, Tk)  # (n, Tk)
    by_diag = np.zeros((H, 2 * Tk + 1))
    for h in range(H):
        by_diag[h] = np.bincount(diag.ravel(), weights=w[h].ravel(), minlength=2 * Tk + 1)
    diagonals = np.argsort(-by_diag, -1, kind="stable")[:, :v]  # (H, V)
    return columns, diagonals


def vertical_slash_kept(w: np.ndarray, diag: np.ndarray, choice: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """(H, n): the mass of rows ``w`` (H, n, Tk) on the chosen columns and diagonals (their union); ``diag``
    (n, Tk): each key's diagonal (``offsets``)."""
    H, n, Tk = w.shape
    columns, diagonals = choice
    out = np.empty((H, n), w.dtype)
    for h in range(H):
        keep = np.zeros(2 * Tk + 1, bool)
        keep[diagonals[h]] = True
        mask = keep[diag]  # (n, Tk)
        mask[:, columns[h]] = True
        out[h] = kept(w[h][None], mask)[0]
    return out


def block_sparse_kept(w: np.ndarray, budget: int, block: int = BLOCK) -> np.ndarray:
    """(H, n): rows ``w`` (H, n, Tk) of one query block keep the ``budget // block`` key blocks holding the most
    of their mass (the same blocks for every row of the block, as MInference's block-sparse kernel keeps)."""
    H, n, Tk = w.shape
    nb = -(-Tk // block)
    padded = np.zeros((H, n, nb * block), w.dtype)
    padded[:, :, :Tk] = w
    per_block = padded.reshape(H, n, nb, block).sum(-1)  # (H, n, nb)
    keep = np.argsort(-per_block.sum(1), -1, kind="stable")[:, : max(1, budget // block)]  # (H, kept blocks)
    return np.take_along_axis(per_block, keep[:, None, :].repeat(n, 1), -1).sum(-1)


def pattern_of(kept: dict[str, np.ndarray], threshold: float = DENSE_BELOW) -> np.ndarray:
    """(...,) str: the pattern among PATTERNS whose kept mass (each (...,)) is highest, "dense" where even that
    keeps less than ``threshold``."""
    stack = np.stack([np.asarray(kept[p], float) for p in PATTERNS])  # (3, ...)
    best = np.array(PATTERNS, object)[stack.argmax(0)]
    return np.where(stack.max(0) >= threshold, best, "dense").astype(object)


def null_hi(values: np.ndarray, rng: np.random.Generator, n_boot: int = BOOTSTRAP) -> np.ndarray:
    """(H,): the upper end (97.5th percentile) of a 95% bootstrap interval of each row's mean, ``values`` (H, n)."""
    values = np.asarray(values, float)
    H, n = values.shape
    if n == 0:
        return np.full(H, np.nan)
    picks = rng.integers(0, n, (n_boot, n))  # (B, n)
    means = values[:, picks].mean(-1)  # (H, B)
    return np.percentile(means, 97.5, axis=-1)


def role_of(frame: pd.DataFrame) -> np.ndarray:
    """Each head's class, the first of ROLES that applies: retrieval (at least RETRIEVAL_MIN and above its null),
    sink (over SINK_THRESHOLD and above its null), streaming (loses at most STREAMING_MAX when streamed), else full
    (needs the whole cache)."""
    retrieval = (frame.retrieval > frame.retrieval_null_hi) & (frame.retrieval >= RETRIEVAL_MIN)
    sink = (frame.sink > SINK_THRESHOLD) & (frame.sink > frame.sink_null_hi)
    streaming = frame.streaming <= STREAMING_MAX
    return np.select([retrieval.to_numpy(), sink.to_numpy(), streaming.to_numpy()], list(ROLES[:3]), "full")


# ---- the probes --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    """One needle-in-a-haystack prompt: the prompt's text, the answer the needle holds, the needle's depth."""

    text: str
    answer: str  # the code, with its leading space, as the model should continue
    depth: float  # where in the haystack the needle sits, 0 (start) to 1 (end)


def _count(backend, texts: list[str]) -> list[int]:
    """Tokens of each text alone (no special tokens): the tokenizer's, or words for a word-vocabulary model."""
    tok = getattr(backend, "tokenizer", None)
    if tok is None:
        return [len(t.split()) for t in texts]
    return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def _sentences(text: str | None, seed: int, count: int) -> list[str]:
    """Haystack sentences: the user's document split at sentence ends (or lines), or ``count`` generated ones."""
    if text is None:
        return [" " + s for s in sentences(count, seed)]
    parts = [p for p in re.split(r"(?<=[.!?\n])\s+", text) if p.strip()]
    if not parts:
        raise ValueError("The document is empty: give a text to hide the needles in, or none for the bundled one.")
    return [" " + p.strip() for p in parts]


def probes(backend, text: str | None, tokens: int, needles: int, seed: int, random_answer: bool = False
           ) -> list[Probe]:
    """``needles`` probes of about ``tokens`` tokens each, the needle at depths spread over the haystack; with
    ``random_answer`` the code is replaced by as many random tokens of the haystack (the null probe)."""
    if needles < 1:
        raise ValueError(f"needles must be 1 or more, not {needles}.")
    rng = np.random.default_rng(seed)
    codes = ["".join(str(d) for d in rng.integers(0, 10, CODE_DIGITS)) for _ in range(needles)]
    frame_tokens = sum(_count(backend, [NEEDLE.format(code=codes[0]), QUESTION])) + 4  # + specials, margin
    room = tokens - frame_tokens
    if room < 16:
        raise ValueError(f"{tokens:,} tokens leave no room for a haystack: ask for at least {frame_tokens + 16}.")
    pool = _sentences(text, seed, max(64, tokens // 4))
    counts = _count(backend, pool)
    hay, used = [], 0
    for s, n in zip(pool, counts):
        if used + n > room:
            break
        hay.append(s)
        used += n
    if not hay:
        raise ValueError("The document's first sentence is longer than the probe: give a shorter one or more tokens.")
    words = sorted({w for s in hay for w in s.split() if w.isalpha()})  # whole words: "rang." + "." would merge
    out = []
    for i, code in enumerate(codes):
        depth = (i + 0.5) / needles
        at = int(round(depth * len(hay)))
        answer = " " + code
        if random_answer:
            answer = " " + " ".join(rng.choice(words, _count(backend, [answer])[0]))
        out.append(Probe("".join(hay[:at]) + NEEDLE.format(code=answer.strip()) + "".join(hay[at:]) + QUESTION,
                         answer, depth))
    return out


def needle_span(tokens, prompt_len: int, answer_tokens: list[str]) -> tuple[int, int]:
    """(start, stop) of the last occurrence of the answer's tokens in the prompt (the needle, before the question);
    a ValueError when the tokenizer cut them otherwise inside the text."""
    n = len(answer_tokens)
    for start in range(prompt_len - n, -1, -1):
        if list(tokens[start:start + n]) == answer_tokens:
            return start, start + n
    raise ValueError("The needle's tokens were not found in the probe as tokenized.")


def _answer_tokens(backend, probe: Probe) -> list[str]:
    """The answer's tokens as they read inside the needle (after "is")."""
    tok = getattr(backend, "tokenizer", None)
    if tok is None:
        return probe.answer.split()
    return tok.convert_ids_to_tokens(tok(probe.answer, add_special_tokens=False)["input_ids"])


# ---- reading a trace, a layer at a time -------------------------------------------------------------------------

def query_blocks(T: int, block: int = BLOCK, n: int = QUERY_BLOCKS) -> list[tuple[int, int]]:
    """(start, stop) of up to ``n`` query blocks spread over the last three quarters of T, the last block first
    (vertical-slash's estimate reads it before the others)."""
    last = max(0, T - block)
    starts = np.unique(np.linspace(T // 4, last, n).astype(int) // block * block) if T > block else np.array([0])
    starts = sorted({int(s) for s in starts if s < last} | {last}, key=lambda s: s != last)
    return [(s, min(s + block, T)) for s in starts]


class _Scores:
    """Per-row mass scores of every head, gathered probe by probe: name -> (L, H, rows) as lists."""

    def __init__(self, L: int):
        self.rows: dict[str, list] = {k: [[] for _ in range(L)] for k in
                                      ("sink", "streaming", "sink_null", "streaming_null", *PATTERNS)}

    def add(self, layer: int, name: str, values: np.ndarray) -> None:
        self.rows[name][layer].append(np.asarray(values, np.float64))

    def stacked(self, name: str) -> np.ndarray:
        """(L, H, rows)."""
        return np.stack([np.concatenate(per, -1) for per in self.rows[name]])


def score_trace(trace, scores: _Scores, rng: np.random.Generator, causal: bool, block: int = BLOCK,
                steps: tuple[int, int] | None = None, needle: tuple[int, int] | None = None):
    """Read one probe's trace a layer at a time: mass and pattern scores into ``scores``; with ``steps`` (the
    first query that generated, how many) and ``needle``, return retrieval hits (L, H, |needle|)."""
    w_ = trace.weights
    L, H, T, _ = w_.shape
    heads = list(range(H))
    budget = budget_of(T, block)
    blocks = query_blocks(T, block)
    hits = None if steps is None else np.zeros((L, H, needle[1] - needle[0]), bool)
    made = [masks(np.arange(a, b), T, causal, rng, budget, block=block) for a, b in blocks]  # once for every layer
    for layer in range(L):
        choice = None
        for (a, b), m in zip(blocks, made):
            w = w_.tile(layer, heads, a, b)  # (H, rows, Tk)
            for name, v in mass_scores(w, m).items():
                scores.add(layer, name, v)
            if choice is None:  # the last block: MInference's estimate of the verticals and slashes
                choice = vertical_slash_choice(w, np.arange(a, b), budget)
            scores.add(layer, "a-shape", a_shape_kept(w, m))
            scores.add(layer, "vertical-slash", vertical_slash_kept(w, m.diagonal, choice))
            scores.add(layer, "block-sparse", block_sparse_kept(w, budget, block))
        if steps is not None:
            q0, n = steps
            top = w_.tile(layer, heads, q0, q0 + n).argmax(-1)  # (H, S) each step's most attended key
            hits[layer] = retrieval_hits(top, trace.tokens, trace.tokens[q0 + 1:q0 + 1 + n], needle)
    return hits


# ---- the atlas over a backend (duck-typed) ------------------------------------------------------------------------

def _step(progress, done: int, total: int, what: str) -> None:
    if progress is not None:
        progress(done, total, what)


def head_atlas(backend, text: str | None = None, *, tokens: int = 2048, needles: int = 3, seed: int = 0,
               progress: Callable[[int, int, str], None] | None = None) -> pd.DataFrame:
    """One row per (layer, head): retrieval, streaming, sink and their nulls' upper bounds, the pattern and each
    pattern's kept mass, and the head's class (``role``). ``text``: the haystack (None: bundled sentences).
    ``progress(done, total, what)`` after each forward; an exception it raises stops the atlas there.
    ``attrs`` carry the probes (text, needle span, what the model answered) for opening a head at the needle."""
    if not isinstance(tokens, (int, np.integer)) or tokens < MIN_TOKENS:
        raise ValueError(f"tokens must be a whole number of at least {MIN_TOKENS}, not {tokens!r}.")
    if backend.kind == "encoder-decoder":
        raise ValueError("The head atlas covers encoders and causal language models; encoder–decoders are not "
                         "supported.")
    limit = backend.max_tokens
    generates = backend.kind == "decoder" and backend.can("generate")
    if tokens + int(generates) > limit:  # a causal model needs room for at least one generated token
        raise ValueError(f"{backend.key} takes at most {limit:,} tokens; ask for {limit - int(generates):,} or fewer.")
    rng = np.random.default_rng(seed)
    real = probes(backend, text, tokens, needles, seed)
    null = probes(backend, text, tokens, needles, seed, random_answer=True) if generates else []
    L, H = backend.n_layers, backend.n_heads
    scores, kept = _Scores(L), []
    hits = {"real": [], "null": []}
    total, done = len(real) + len(null), 0
    for kind, group in (("real", real), ("null", null)):
        for probe in group:
            _step(progress, done, total, f"{kind} probe {done + 1} of {total}: the model's forward")
            if generates:
                g = backend.generate(probe.text)  # the backend's default: greedy, a few tokens more than the code
                trace, prompt_len = g.trace, g.prompt_len
                needle = needle_span(trace.tokens, prompt_len, _answer_tokens(backend, probe))
                steps = (prompt_len - 1, g.n_new)
            else:
                trace = backend.trace(probe.text, max_tokens=tokens)
                needle = needle_span(trace.tokens, trace.n_tokens, _answer_tokens(backend, probe))
                prompt_len, steps, g = trace.n_tokens, None, None
            into = _Scores(L) if kind == "null" else scores  # a null probe's mass scores are not kept
            got = score_trace(trace, into, rng, trace.kind == "decoder", steps=steps, needle=needle)
            if got is not None:
                hits[kind].append(got)
            if kind == "real":
                kept.append(dict(text=probe.text, depth=probe.depth, answer=probe.answer.strip(), needle=needle,
                                 tokens=trace.n_tokens, prompt_len=prompt_len,
                                 generated="" if g is None else g.continuation))
            del trace, g
            done += 1
    _step(progress, done, total, "done")
    frame = atlas_frame(scores, hits["real"], hits["null"], rng, L, H)
    frame.attrs.update(model=backend.key, tokens=int(np.mean([p["tokens"] for p in kept])), probes=kept, seed=seed,
                       budget=budget_of(kept[0]["tokens"]), retrieval=generates)
    return frame


def atlas_frame(scores: _Scores, real_hits: list, null_hits: list, rng: np.random.Generator, L: int, H: int
                ) -> pd.DataFrame:
    """The atlas's table from gathered scores: hits are lists of (L, H, |needle|) per probe."""
    layer, head = np.divmod(np.arange(L * H), H)
    cols: dict[str, np.ndarray] = {"layer": layer, "head": head}

    def hit_scores(hits):
        if not hits:
            return np.full(L * H, np.nan), np.zeros((L * H, 0))
        every = np.concatenate([h.reshape(L * H, -1) for h in hits], -1).astype(float)  # (L·H, probes·|needle|)
        return every.mean(-1), every

    cols["retrieval"], _ = hit_scores(real_hits)
    _, null_every = hit_scores(null_hits)
    cols["retrieval_null_hi"] = null_hi(null_every, rng) if null_every.shape[1] else np.full(L * H, np.nan)
    for name in ("streaming", "sink"):
        cols[name] = scores.stacked(name).reshape(L * H, -1).mean(-1)
        cols[f"{name}_null_hi"] = null_hi(scores.stacked(f"{name}_null").reshape(L * H, -1), rng)
    keeps = {p: scores.stacked(p).reshape(L * H, -1).mean(-1) for p in PATTERNS}
    cols["pattern"] = pattern_of(keeps)
    cols.update({f"kept_{p.replace('-', '_')}": keeps[p] for p in PATTERNS})
    frame = pd.DataFrame(cols)
    frame["role"] = role_of(frame.fillna({"retrieval": 0.0, "retrieval_null_hi": 0.0}))
    return frame


# ---- the causal check --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Knockout:
    """The needle's recall with no head knocked out, the top-k retrieval heads, and k random heads."""

    k: int
    top: tuple  # ((layer, head), ...) knocked out by retrieval score
    random: tuple
    base: float  # share of the answers' tokens the model predicts (teacher-forced, greedy) as it is
    without_top: float
    without_random: float

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({"heads knocked out": ["none", f"top {self.k} retrieval", f"{self.k} random"],
                             "needle recall": [self.base, self.without_top, self.without_random],
                             "heads": ["", _spell(self.top), _spell(self.random)]})


def _spell(heads) -> str:
    return ", ".join(f"L{layer}H{head}" for layer, head in heads)


def knockout_recall(backend, atlas: pd.DataFrame, k: int = KNOCKOUT_K, seed: int = 0,
                    progress: Callable[[int, int, str], None] | None = None) -> Knockout:
    """Knock out (every query sees no key: the head's output is zero) the ``k`` heads with the highest retrieval
    score, then ``k`` random others, and measure the needle's recall on the atlas's probes: each prompt is run with
    its answer appended, and recall is the share of answer tokens the model predicts as its top next token."""
    from .interventions import Knockout as Cut, forward

    if not atlas.attrs.get("retrieval"):
        raise ValueError("The knock-out check needs a causal language model's atlas (retrieval scores).")
    L, H = backend.n_layers, backend.n_heads
    if not 1 <= k < L * H:
        raise ValueError(f"k must be between 1 and {L * H - 1}, not {k}.")
    ranked = atlas.sort_values(["retrieval", "layer", "head"], ascending=[False, True, True], kind="stable")
    top = tuple((int(r.layer), int(r.head)) for r in ranked.head(k).itertuples())
    rest = [(int(r.layer), int(r.head)) for r in ranked.iloc[k:].itertuples()]
    rng = np.random.default_rng(seed)
    random = tuple(sorted(rest[i] for i in rng.choice(len(rest), k, replace=False)))
    tok = backend.tokenizer
    conditions = {"base": (), "top": top, "random": random}
    got = {name: [] for name in conditions}
    probes_ = atlas.attrs["probes"]
    total, done = len(probes_) * len(conditions), 0
    for p in probes_:
        ids = tok(p["text"] + " " + p["answer"], add_special_tokens=False)["input_ids"]
        answer = tok(" " + p["answer"], add_special_tokens=False)["input_ids"]
        for name, heads in conditions.items():
            _step(progress, done, total, f"knock-out run {done + 1} of {total}")
            trace, logits, _ = forward(backend, ids, tuple(Cut(layer, head) for layer, head in heads))
            full = tok.convert_tokens_to_ids(list(trace.tokens))  # the ids as run, specials included
            start, stop = needle_span(trace.tokens, trace.n_tokens, tok.convert_ids_to_tokens(answer))
            predicted = logits[start - 1:stop - 1].argmax(-1).numpy()  # (|answer|,)
            got[name].append(float((predicted == np.asarray(full[start:stop])).mean()))
            del trace, logits
            done += 1
    _step(progress, done, total, "done")
    return Knockout(k, top, random, *(float(np.mean(got[n])) for n in conditions))


__all__ = ["head_atlas", "knockout_recall", "Knockout", "retrieval_hits", "mass_scores", "a_shape_kept",
           "masks", "vertical_slash_choice", "vertical_slash_kept", "block_sparse_kept", "pattern_of", "null_hi", "role_of",
           "probes", "REFERENCES", "PATTERNS", "ROLES"]
