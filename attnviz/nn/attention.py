"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, §3.2).

Corrects the seed: scores are scaled by √d_k of a head, not √d_model, and the weights are
returned instead of being kept on the module.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..capture.hooks import head_value_norms
from ..capture.record import active, hand_over
from ..core.weights import LayerQK, causal_mask


def scaled_dot_product_attention(q, k, v, mask=None, dropout: nn.Module | None = None):
    """softmax(q kᵀ / √d_k) v -> (out (..., Tq, Dv), weights (..., Tq, Tk)).

    ``mask`` is boolean and broadcasts to (..., Tq, Tk); True means "may attend". A row with
    nothing to attend to gets all-zero weights (and a zero output), never NaN.
    """
    # Scaling q (Tq·d_k values) rather than the scores (Tq·Tk) is the same product for less work.
    scores = (q / math.sqrt(q.size(-1))) @ k.transpose(-2, -1)  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:  # fully masked rows: uniform after softmax, zero after this
        weights = weights * mask
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights


def attend(module, q, k, v, mask=None, causal: bool = False, dropout: nn.Module | None = None):
    """The attention of attnviz's own modules -> (out (B, H, Tq, Dv), weights (B, H, Tq, Tk) or None).

    ``mask`` is boolean (True = may attend) and broadcasts to (B, H, Tq, Tk); ``causal`` hides later keys.
    Inside ``attnviz.capture.record.record`` the call hands its queries, keys and mask (per text, cut to its length in
    a padded batch) to the recorder and runs torch's fused SDPA, returning no weights (the trace computes them
    on demand); otherwise it returns them.
    """
    Tq, Tk = q.shape[-2], k.shape[-2]
    if causal:
        mask = causal_mask(Tq, Tk, q.device) if mask is None else mask & causal_mask(Tq, Tk, q.device)
    recorder = active()
    if recorder is None:
        return scaled_dot_product_attention(q, k, v, mask, dropout)
    scale = q.shape[-1] ** -0.5
    m = None if mask is None else mask.view((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (1 or B, 1 or H, 1 or Tq, Tk)
    layers = []
    for b, n in enumerate(recorder.items(q.shape[0], Tq, Tk)):  # one text, or each text of a padded batch
        tq, tk = (Tq, Tk) if n is None else (n, n)
        extra = None
        if m is not None:
            extra = m[b if m.shape[0] > 1 else 0, :, :n, :n].expand(-1, tq, tk)  # (1 or H, tq, tk)
            if bool(extra.all()) or (causal and bool((extra == causal_mask(tq, tk, q.device)).all())):
                extra = None  # nothing that causality alone does not explain
        layers.append(LayerQK(q[b, :, :n], k[b, :, :n], scale, causal=causal, mask=extra))
    out = hand_over(module, layers, v)  # (H, Tq, Dv) or None
    if out is not None:  # computed from the same weights a reducer read: rows that see no key are 0 already
        return out[None], None
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    if mask is not None:  # fully masked rows: zero, as the weights say (SDPA gives NaN there)
        out = out.nan_to_num(0.0)
    return out, None


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention; returns per-head weights."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def forward(self, query, key, value, mask=None, causal: bool = False):
        """(B, Tq, D), (B, Tk, D), (B, Tk, D) -> (out (B, Tq, D), weights (B, H, Tq, Tk), None when recorded).

        ``mask`` broadcasts to (B, H, Tq, Tk), True = attend; ``causal`` also hides later keys.
        """
        q = self._split(self.q_proj(query))  # (B, H, Tq, Dh)
        k = self._split(self.k_proj(key))  # (B, H, Tk, Dh)
        v = self._split(self.v_proj(value))  # (B, H, Tk, Dh)
        ctx, weights = attend(self, q, k, v, mask, causal, self.dropout)  # (B, H, Tq, Dh)
        B, _, Tq, _ = ctx.shape
        ctx = ctx.transpose(1, 2).reshape(B, Tq, self.d_model)  # (B, Tq, D)
        return self.out_proj(ctx), weights

    def value_norms(self, value):
        """‖f_h(x_j)‖ = ‖(x_j W_V + b_V)_h W_O,h‖ per head and key (Kobayashi et al. 2020): (B, H, Tk)."""
        v = self._split(self.v_proj(value))  # (B, H, Tk, Dh)
        w_o = self.out_proj.weight.view(self.d_model, self.n_heads, self.d_head).permute(1, 2, 0)  # (H, Dh, D)
        return head_value_norms(v, w_o)  # (B, H, Tk)

    def load_from_torch(self, mha: nn.MultiheadAttention):
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (batch_first or not)."""
        wq, wk, wv = mha.in_proj_weight.detach().chunk(3)
        bq, bk, bv = mha.in_proj_bias.detach().chunk(3)
        with torch.no_grad():
            for lin, w, b in ((self.q_proj, wq, bq), (self.k_proj, wk, bk), (self.v_proj, wv, bv)):
                lin.weight.copy_(w)
                lin.bias.copy_(b)
            self.out_proj.weight.copy_(mha.out_proj.weight)
            self.out_proj.bias.copy_(mha.out_proj.bias)
        return self


__all__ = ["scaled_dot_product_attention", "attend", "head_value_norms", "causal_mask", "MultiHeadAttention"]
