"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, §3.2).

Corrects the seed: scores are scaled by √d_k of a head, not √d_model, and the weights are
returned instead of being kept on the module.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def scaled_dot_product_attention(q, k, v, mask=None, dropout: nn.Module | None = None, weights_out=None):
    """softmax(q kᵀ / √d_k) v -> (out (..., Tq, Dv), weights (..., Tq, Tk)).

    ``mask`` is boolean and broadcasts to (..., Tq, Tk); True means "may attend". A row with
    nothing to attend to gets all-zero weights (and a zero output), never NaN. ``weights_out``
    (inference only) is a (..., Tq, Tk) tensor the weights are written into and returned as.
    """
    # Scaling q (Tq·d_k values) rather than the scores (Tq·Tk) is the same product for less work.
    scores = (q / math.sqrt(q.size(-1))) @ k.transpose(-2, -1)  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1, out=weights_out)
    if mask is not None:  # fully masked rows: uniform after softmax, zero after this
        weights = weights * mask if weights_out is None else weights.mul_(mask)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights


def head_value_norms(v, w_o):
    """‖v_h W_O,h‖ per head and position (Kobayashi et al. 2020): values v (..., H, T, Dh) and each head's
    slice of the output projection w_o (H, Dh, D) -> (..., H, T).

    ‖v W‖² = v (W Wᵀ) vᵀ: a Dh×Dh Gram matrix per head instead of widening every value to D.
    """
    gram = w_o @ w_o.transpose(-2, -1)  # (H, Dh, Dh)
    return ((v @ gram) * v).sum(-1).clamp(min=0).sqrt()  # (..., H, T)


def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) boolean mask: position i may attend to positions ≤ i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


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

    def forward(self, query, key, value, mask=None, head_mask=None, value_norms: bool = False, weights_out=None):
        """(B, Tq, D), (B, Tk, D), (B, Tk, D) -> (out (B, Tq, D), weights (B, H, Tq, Tk)).

        ``mask`` broadcasts to (B, H, Tq, Tk), True = attend. ``head_mask`` (H,) scales each
        head's contribution (0 removes a head), as in Michel et al. 2019. With ``value_norms``
        a third item, ``self.value_norms(value)`` from the values already projected. The weights
        are written into ``weights_out`` (B, H, Tq, Tk) when it is given (inference only).
        """
        q = self._split(self.q_proj(query))  # (B, H, Tq, Dh)
        k = self._split(self.k_proj(key))  # (B, H, Tk, Dh)
        v = self._split(self.v_proj(value))  # (B, H, Tk, Dh)
        ctx, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout, weights_out)  # (B, H, Tq, Dh)
        if head_mask is not None:
            ctx = ctx * head_mask.view(1, -1, 1, 1)
        B, _, Tq, _ = ctx.shape
        ctx = ctx.transpose(1, 2).reshape(B, Tq, self.d_model)  # (B, Tq, D)
        out = self.out_proj(ctx)
        return (out, weights, self._value_norms(v)) if value_norms else (out, weights)

    def value_norms(self, value):
        """‖f_h(x_j)‖ = ‖(x_j W_V + b_V)_h W_O,h‖ per head and key (Kobayashi et al. 2020): (B, H, Tk)."""
        return self._value_norms(self._split(self.v_proj(value)))  # (B, H, Tk, Dh) -> (B, H, Tk)

    def _value_norms(self, v):
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


__all__ = ["scaled_dot_product_attention", "head_value_norms", "causal_mask", "MultiHeadAttention"]
