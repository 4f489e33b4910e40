"""A role for every head: previous-token, induction, duplicate-token, sink, self, local, broad, delimiter.

Each pattern role is the weight a head puts on a set of keys, above what a uniform head would put there and
scaled so that a head that puts all its weight there scores 1 and a uniform head scores 0 (below chance is 0):
for query row i with attendable keys A_i and role keys S_i ⊂ A_i, score_i = (Σ_{j∈S_i} α_ij − u_i)/(1 − u_i) with
u_i = |S_i|/|A_i|, averaged over the rows where 0 < |S_i| < |A_i|. "local" compares the head's mean distance
with a uniform head's, "broad" is the normalised entropy. Computed a tile of query rows at a time, so any
length costs what a forward costs. Pure: traces in, (L, H) arrays out.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..core.tokens import NEWLINE, clean
from .heads import is_punctuation


class Role(NamedTuple):
    label: str
    definition: str  # one line: which keys, for which queries
    reference: str
    causal: bool  # needs a causal model: an encoder's query could read the answer itself


OLSSON = "Olsson et al. 2022, *In-context Learning and Induction Heads*"
CLARK = "Clark et al. 2019, *What Does BERT Look At?*"
ROLES = {
    "previous": Role("previous-token", "weight on the token just before the query (key i − 1)", CLARK, False),
    "induction": Role(
        "induction",
        "weight on the token that followed an earlier occurrence of the query's token (keys j + 1 with "
        "t_j = t_i, j < i): [A][B] … [A] → [B]", OLSSON, True),
    "duplicate": Role(
        "duplicate-token", "weight on earlier occurrences of the query's own token (keys j < i with t_j = t_i)",
        "Wang et al. 2023, *Interpretability in the Wild* (IOI)", True),
    "sink": Role(
        "first-token / sink", "weight on the first token (key 0), whatever it is",
        "Xiao et al. 2024, *Efficient Streaming Language Models with Attention Sinks*; " + CLARK, False),
    "self": Role("self", "weight on the query's own position (key i)", CLARK, False),
    "local": Role(
        "local", "1 − mean attention distance Σ_j α_ij |i − j| ÷ a uniform head's: 1 = on itself, 0 = no closer "
        "than uniform", "Vig & Belinkov 2019, *Analyzing the Structure of Attention in a Transformer LM*", False),
    "broad": Role(
        "broad", "normalised entropy −Σ_j α_ij ln α_ij ÷ ln |A_i|: 1 = uniform over what it may see, 0 = one key",
        CLARK, False),
    "delimiter": Role(
        "delimiter", "weight on separators: special tokens after the first ([SEP], </s>), punctuation, newlines",
        CLARK, False),
}
PATTERN_ROLES = ("previous", "induction", "duplicate", "sink", "self", "delimiter")
CAUSAL_NOTE = ("This is an encoder: every query sees the whole text, later tokens included, so the roles that "
               "need causality (induction, duplicate-token) are left out.")


def roles_for(causal: bool) -> list[str]:
    """The roles that apply: every role for a causal stack, all but the causal ones for an encoder."""
    return [r for r, role in ROLES.items() if causal or not role.causal]


def is_newline(token: str) -> bool:
    """True for a token that is a line break: "\\n", GPT-2's "Ċ", a byte-fallback "<0x0A>"."""
    return set(clean(token)) == {NEWLINE}  # clean() shows every kind of line break as the mark


def delimiters(trace) -> np.ndarray:
    """(T,) bool: special tokens other than the first, punctuation and newlines."""
    special = np.asarray(trace.special, bool)
    out = special | np.array([is_punctuation(t) or is_newline(t) for t in trace.tokens])
    out[0] = False  # the first token is the sink role's
    return out


def _codes(tokens) -> np.ndarray:
    """(T,) an integer per distinct token string."""
    return np.unique(np.asarray(tokens, dtype=object).astype(str), return_inverse=True)[1].reshape(-1)


def _targets(role: str, rows: np.ndarray, T: int, codes: np.ndarray, delim: np.ndarray) -> np.ndarray:
    """(rows, T) bool: role keys S_i of each query row (before causality is applied)."""
    j = np.arange(T)[None, :]  # (1, T)
    i = rows[:, None]  # (rows, 1)
    if role == "previous":
        return j == i - 1
    if role == "self":
        return j == i
    if role == "sink":
        return np.broadcast_to(j == 0, (len(rows), T))
    if role == "delimiter":
        return np.broadcast_to(delim[None, :], (len(rows), T))
    same = codes[None, :] == codes[rows][:, None]  # (rows, T): t_j = t_i
    if role == "duplicate":
        return same & (j < i)
    if role == "induction":
        follows = np.zeros_like(same)
        follows[:, 1:] = same[:, :-1] & (j[:, 1:] - 1 < i)  # key j + 1 after an earlier t_j = t_i
        return follows
    raise ValueError(f"unknown role {role!r}")


def role_scores(trace, stack: str | None = None) -> dict[str, np.ndarray]:
    """Role name -> (L, H) scores in [0, 1] for one stack's self-attention, plus "distance" (mean attention
    distance in tokens). An encoder's causal roles (``roles_for``) are left out."""
    s = trace.stack(stack)
    w, causal, keys = s.weights, s.causal, s.keys
    L, H, T, Tk = w.shape
    if T != Tk:
        raise ValueError("roles are defined on self-attention (queries and keys the same tokens), not cross-attention")
    names = roles_for(causal)
    patterns = [r for r in PATTERN_ROLES if r in names]
    codes, delim = _codes(keys.tokens), delimiters(keys)
    n = np.arange(1, T + 1) if causal else np.full(T, T)  # (T,) attendable keys per row
    # A uniform head's mean distance per row: i/2 for causal rows, the mean of |i − j| over all T otherwise.
    i = np.arange(T)
    uniform_dist = i / 2 if causal else (i * (i + 1) / 2 + (T - 1 - i) * (T - i) / 2) / T
    sums = {r: np.zeros((L, H)) for r in (*names, "distance")}
    counts = dict.fromkeys(patterns, 0)
    for a, b in w.spans(H):
        rows = np.arange(a, b)
        seen = np.arange(T)[None, :] <= rows[:, None] if causal else np.ones((b - a, T), bool)  # (rows, T)
        masks = {}
        for r in patterns:
            m = _targets(r, rows, T, codes, delim) & seen  # (rows, T)
            size = m.sum(1)
            use = (size > 0) & (size < n[a:b])  # rows where the role is defined and not everything
            u = size / n[a:b]
            masks[r] = (m.astype(np.float32), use, u)
            counts[r] += int(use.sum())
        gap = np.abs(rows[:, None] - np.arange(T)[None, :]).astype(np.float32)  # (rows, T)
        multi = n[a:b] > 1
        for layer in range(L):
            tile = np.asarray(w.tile(layer, list(range(H)), a, b), np.float32)  # (H, rows, T)
            for r, (m, use, u) in masks.items():
                got = np.einsum("hij,ij->hi", tile, m, dtype=np.float64)  # (H, rows) weight on S_i
                sums[r][layer] += ((got[:, use] - u[use]) / (1 - u[use])).sum(-1)
            dist = np.einsum("hij,ij->hi", tile, gap, dtype=np.float64)  # (H, rows)
            sums["distance"][layer] += dist.sum(-1)
            if "local" in sums:
                far = uniform_dist[a:b] > 0
                sums["local"][layer] += (1 - dist[:, far] / uniform_dist[a:b][far]).sum(-1)
            logs = np.log(tile, out=np.zeros_like(tile), where=tile > 0)
            ent = -np.einsum("hij,hij->hi", tile, logs, dtype=np.float64)  # (H, rows)
            sums["broad"][layer] += (ent[:, multi] / np.log(n[a:b][multi])).sum(-1)
    counts.update(local=int((uniform_dist > 0).sum()), broad=int((n > 1).sum()), distance=T)
    out = {}
    for r, total in sums.items():
        mean = total / counts[r] if counts[r] else np.zeros((L, H))
        out[r] = mean if r == "distance" else np.clip(mean, 0.0, 1.0)
    return out


PROBE_LEN = 50  # random tokens, then the same again (TransformerLens's induction probe)
PROBE = (f"the standard probe: {PROBE_LEN} random tokens drawn without replacement, then the same {PROBE_LEN} again "
         f"({OLSSON}); a head that copies what followed the first occurrence scores high on induction there")


def repeated_tokens(plain_ids, n: int = PROBE_LEN, seed: int = 0) -> list[int]:
    """``n`` distinct ids drawn from ``plain_ids`` with ``seed``, then the same ``n`` again: 2n ids."""
    pool = np.asarray(plain_ids)
    if len(pool) < 2 or n < 2:
        raise ValueError("the probe needs at least two ordinary tokens")
    body = np.random.default_rng(seed).choice(pool, min(n, len(pool)), replace=False).tolist()
    return body + body


def probe_trace(backend, n: int = PROBE_LEN, seed: int = 0):
    """``backend``'s trace of the repeated random-token probe (its specials around it), shortened to fit."""
    n = min(n, (backend.max_tokens - 2) // 2)  # room for [CLS] … [SEP] or <s>
    return backend.trace_ids(repeated_tokens(backend.plain_ids(), n, seed))


def strongest(scores: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """(L, H) index into the returned role names of each head's highest-scoring role."""
    names = [r for r in ROLES if r in scores]
    return np.stack([scores[r] for r in names]).argmax(0), names


def role_table(scores: dict[str, np.ndarray], probe: dict[str, np.ndarray] | None = None, by_probe: bool = False):
    """A pandas DataFrame, one row per head: layer, head, strongest role (on the probe with ``by_probe``), each score
    (and each on the probe)."""
    import pandas as pd

    L, H = scores["distance"].shape
    layer, head = np.divmod(np.arange(L * H), H)  # (L·H,)
    best, names = strongest(scores)
    top, top_names = strongest(probe) if by_probe else (best, names)
    columns = {"strongest role (probe)" if by_probe else "strongest role":
               [ROLES[top_names[i]].label for i in top.ravel()]}
    columns.update({ROLES[r].label: scores[r].ravel() for r in names})
    columns["mean distance (tokens)"] = scores["distance"].ravel()
    for r in names if probe else ():
        if r in probe:
            columns[f"{ROLES[r].label} (probe)"] = probe[r].ravel()
    return pd.DataFrame({"layer": layer, "head": head, **columns})
