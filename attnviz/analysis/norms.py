"""Norm statistics of a trace: residual-stream norms, sublayer output norms and their shares, and
norm-based attention ‖α·f(x)‖ (Kobayashi et al. 2020). Pure numpy (and pandas for the table).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.trace import NORM_KEYS

# Per-layer statistics as rows of the Norms page, in display order: name -> what it is.
NORM_STATS = {
    "residual_in": "‖residual stream‖ entering the layer (hidden state l)",
    "residual_out": "‖residual stream‖ leaving the layer (hidden state l + 1)",
    **{k: v for k, v in NORM_KEYS.items() if k != "value_norms"},
    "attn_share": "attention's share of the layer's update: attn_out / (attn_out + ffn_out)",
    "attn_ratio": "attn_out / residual_in: attention's update relative to the stream it is added to",
    "ffn_ratio": "ffn_out / residual_in: the feed-forward update relative to the stream entering the layer",
}

# What the Norms page calls each statistic (the table and the CSV keep the short keys).
NAMES = {
    "residual_in": "residual stream entering the layer",
    "residual_out": "residual stream leaving the layer",
    "attn_out": "attention update",
    "ffn_out": "feed-forward update",
    "ln1_in_mean": "mean of the attention LayerNorm's input",
    "ln1_in_std": "spread (std) of the attention LayerNorm's input",
    "ln1_out": "attention LayerNorm's output",
    "ln2_in_mean": "mean of the feed-forward LayerNorm's input",
    "ln2_in_std": "spread (std) of the feed-forward LayerNorm's input",
    "ln2_out": "feed-forward LayerNorm's output",
    "attn_share": "attention's share of the update",
    "attn_ratio": "attention update ÷ residual stream",
    "ffn_ratio": "feed-forward update ÷ residual stream",
}


def residual_norms(hidden_states: np.ndarray) -> np.ndarray:
    """(L+1, T) L2 norm of each hidden state: the embeddings, then each layer's output."""
    return np.linalg.norm(np.asarray(hidden_states, np.float64), axis=-1).astype(np.float32)


def layer_stats(trace) -> dict[str, np.ndarray]:
    """Every statistic of NORM_STATS the trace supports, each (L, T); absent ones are left out."""
    out: dict[str, np.ndarray] = {}
    if trace.hidden_states is not None:
        res = residual_norms(trace.hidden_states)
        out["residual_in"], out["residual_out"] = res[:-1], res[1:]
    out.update({k: np.asarray(v) for k, v in trace.norms.items() if k != "value_norms"})
    with np.errstate(invalid="ignore", divide="ignore"):
        if "attn_out" in out and "ffn_out" in out:
            out["attn_share"] = out["attn_out"] / (out["attn_out"] + out["ffn_out"])
        if "residual_in" in out:
            for part, ratio in (("attn_out", "attn_ratio"), ("ffn_out", "ffn_ratio")):
                if part in out:
                    out[ratio] = out[part] / out["residual_in"]
    return {k: out[k].astype(np.float32) for k in NORM_STATS if k in out}


def norm_attention(attn: np.ndarray, value_norms: np.ndarray, normalize: bool = False) -> np.ndarray:
    """‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖ for weights (..., Tq, Tk) and value norms (..., Tk).

    With ``normalize`` each query's row is divided by its sum, so it reads like attention (rows of
    zeros stay zero).
    """
    attn, vn = np.asarray(attn, np.float64), np.asarray(value_norms, np.float64)
    if attn.shape[:-2] + attn.shape[-1:] != vn.shape:
        raise ValueError(f"attention {attn.shape} and value norms {vn.shape} do not match")
    w = attn * vn[..., None, :]  # (..., Tq, Tk)
    if normalize:
        s = w.sum(-1, keepdims=True)
        w = np.divide(w, s, out=np.zeros_like(w), where=s > 0)
    return w.astype(np.float32)


def norm_table(trace) -> pd.DataFrame:
    """One row per (layer, token): layer, token index, token, then each statistic of ``layer_stats``."""
    stats = layer_stats(trace)
    L, T = trace.n_layers, trace.n_tokens
    table = {
        "layer": np.repeat(np.arange(L), T),
        "token_index": np.tile(np.arange(T), L),
        "token": np.tile(np.array(trace.tokens, dtype=object), L),
    }
    table.update({k: v.reshape(-1) for k, v in stats.items()})  # (L, T) -> (L·T,), layer-major
    return pd.DataFrame(table)
