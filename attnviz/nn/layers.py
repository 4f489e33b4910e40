"""LayerNorm, position-wise feed-forward, residual sublayers, encoder and decoder layers.

Corrects the seed: LayerNorm uses the biased variance with eps inside the root (as the paper
and torch do), and the decoder's self-attention is causal.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import MultiHeadAttention

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact (erf), as BERT's "gelu"
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
}


class LayerNorm(nn.Module):
    """γ · (x − mean) / √(var + eps) + β over the last dimension (Ba et al. 2016)."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        # The formula above, with the biased variance and eps inside the root (the seed has neither),
        # in torch's fused kernel as nanoGPT does: written out it takes eight passes over x, which cost
        # the built-in encoder its lead over Hugging Face's at 128 tokens.
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = act(x W₁ + b₁) W₂ + b₂, applied to each position alone."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose from {', '.join(ACTIVATIONS)}")
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.act = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.fc2(self.dropout(self.act(self.fc1(x))))


class Residual(nn.Module):
    """A sublayer with its residual connection and LayerNorm.

    Post-norm (the paper, BERT): norm(x + sublayer(x)). Pre-norm (GPT-2): x + sublayer(norm(x)).
    """

    def __init__(self, d_model: int, norm_first: bool = False, dropout: float = 0.0, eps: float = 1e-5):
        super().__init__()
        self.norm = LayerNorm(d_model, eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, sublayer):
        """``sublayer(x) -> (out, extra)``; returns (new x, extra)."""
        if self.norm_first:
            out, extra = sublayer(self.norm(x))
            return x + self.dropout(out), extra
        out, extra = sublayer(x)
        return self.norm(x + self.dropout(out)), extra


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual sublayer."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False, eps=1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, activation, dropout)
        self.sub1 = Residual(d_model, norm_first, dropout, eps)
        self.sub2 = Residual(d_model, norm_first, dropout, eps)

    def forward(self, x, mask=None, causal: bool = False):
        """(B, T, D) -> (out (B, T, D), weights (B, H, T, T) or None when recorded); ``causal``: a decoder-only
        model's layer, each position sees only itself and earlier ones."""
        x, weights = self.sub1(x, lambda h: self.self_attn(h, h, h, mask, causal=causal))
        x, _ = self.sub2(x, lambda h: (self.ffn(h), None))
        return x, weights


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder output, then feed-forward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False, eps=1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, activation, dropout)
        self.sub1 = Residual(d_model, norm_first, dropout, eps)
        self.sub2 = Residual(d_model, norm_first, dropout, eps)
        self.sub3 = Residual(d_model, norm_first, dropout, eps)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        """x (B, Tt, D), memory (B, Ts, D) -> (out, self weights (B, H, Tt, Tt), cross weights (B, H, Tt, Ts)).

        The self-attention is causal on top of ``self_mask``: a target position never sees later ones.
        """
        x, self_w = self.sub1(x, lambda h: self.self_attn(h, h, h, self_mask, causal=True))
        x, cross_w = self.sub2(x, lambda h: self.cross_attn(h, memory, memory, memory_mask))
        x, _ = self.sub3(x, lambda h: (self.ffn(h), None))
        return x, self_w, cross_w
