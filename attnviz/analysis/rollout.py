"""How much each input token reaches each position, across layers (Abnar & Zuidema 2020).

Both methods read the same graph: Ã_l = 0.5·Ā_l + 0.5·I, with Ā_l layer l's mean over heads and
rows renormalised, the identity standing in for the residual connection.
"""

from __future__ import annotations

import numpy as np

from ..core.weights import Weights

ROLLOUT = "R_l = Ã_l R_{l−1}, Ã_l = 0.5·Ā_l + 0.5·I (head mean plus the residual, rows renormalised) — Abnar & Zuidema 2020"
FLOW = (
    "the max-flow from each input token to the chosen position through layers 1…l, each edge's capacity "
    "its Ã_l weight — Abnar & Zuidema 2020"
)
FLOW_MAX_TOKENS = 64  # one max-flow per input token and layer: beyond this it stops being interactive
ROLLOUT_MAX_TOKENS = 2048  # L matrix products of T × T: O(L·T³) time and (L, T, T) float64 memory
_SCALE = 1 << 24  # scipy's max-flow needs integer capacities: weights in steps of 2⁻²⁴ (6e-8)


def layer_means(attn) -> np.ndarray:
    """Ā: each layer's mean over its heads, (L, T, T) float64, from an (L, H, T, T) array or a trace's Weights
    (read one head at a time, so no (L, H, T, T) array is made)."""
    if not isinstance(attn, Weights):
        return np.asarray(attn).mean(1, dtype=np.float64)
    L, H, Tq, Tk = attn.shape
    out = np.zeros((L, Tq, Tk))
    for layer in range(L):
        for head in range(H):
            out[layer] += attn.head(layer, head)
    return out / H


def residual_attention(attn, residual: float = 0.5) -> np.ndarray:
    """Ã_l = (1 − r)·Ā_l + r·I with rows renormalised: (L, H, T, T) array or Weights -> (L, T, T) float64."""
    shape = attn.shape if hasattr(attn, "shape") else np.shape(attn)
    if len(shape) != 4 or shape[2] != shape[3]:
        raise ValueError(f"attention must be (layers, heads, T, T), got shape {tuple(shape)}")
    a = (1 - residual) * layer_means(attn) + residual * np.eye(shape[-1])  # (L, T, T)
    return a / a.sum(-1, keepdims=True)


def rollout(attn: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """Attention rollout after every layer: (L, H, T, T) -> (L, T, T); row i of R_l says how much of
    position i after layer l comes from each input token (rows sum to 1)."""
    if attn.shape[-1] > ROLLOUT_MAX_TOKENS:
        raise ValueError(f"attention rollout is limited to {ROLLOUT_MAX_TOKENS:,} tokens (its cost grows with the "
                         f"cube of the length); this text has {attn.shape[-1]:,}")
    out = np.empty((attn.shape[0], attn.shape[2], attn.shape[3]))
    r = np.eye(attn.shape[-1])
    for layer, a in enumerate(residual_attention(attn, residual)):
        r = a @ r
        out[layer] = r
    return out


def flow_graph(layers: np.ndarray):
    """The layered graph of ``layers`` Ã (l, T, T) as a scipy CSR capacity matrix over (l + 1)·T nodes.

    Node k·T + j is token j after layer k (k = 0: the input); the edge from k·T + j to (k + 1)·T + i
    carries Ã_{k+1}[i, j].
    """
    from scipy.sparse import csr_matrix

    n, T, _ = layers.shape
    k, i, j = np.nonzero(layers > 0)  # skip zero capacities: a causal mask's upper triangle
    caps = np.rint(layers[k, i, j] * _SCALE).astype(np.int32)
    return csr_matrix((caps, (k * T + j, (k + 1) * T + i)), shape=((n + 1) * T, (n + 1) * T))


def attention_flow(attn: np.ndarray, target: int, residual: float = 0.5) -> np.ndarray:
    """Max-flow from every input token to position ``target`` after every layer: (L, H, T, T) -> (L, T)."""
    from scipy.sparse.csgraph import maximum_flow

    a = residual_attention(attn, residual)
    L, T, _ = a.shape
    if T > FLOW_MAX_TOKENS:
        raise ValueError(f"attention flow is limited to {FLOW_MAX_TOKENS} tokens; this text has {T}")
    if not 0 <= target < T:
        raise ValueError(f"position {target} is outside the text's {T} tokens")
    out = np.empty((L, T))
    for layer in range(L):
        graph = flow_graph(a[: layer + 1])
        sink = (layer + 1) * T + target
        out[layer] = [maximum_flow(graph, j, sink).flow_value / _SCALE for j in range(T)]
    return out
