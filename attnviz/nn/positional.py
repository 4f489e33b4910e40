"""Position information: the sinusoidal encoding (Vaswani et al. 2017, §3.5) and learned embeddings."""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def sinusoidal_encoding(T: int, D: int) -> torch.Tensor:
    """(T, D): PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)).

    An odd D is allowed: the last (even) column is a sine.
    """
    position = torch.arange(T, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    div_term = torch.exp(torch.arange(0, D, 2, dtype=torch.float64) * -(math.log(10000.0) / D))  # (ceil(D/2),)
    pe = torch.zeros(T, D, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term[: D // 2])
    return pe.float()


class SinusoidalPositions(nn.Module):
    """Adds nothing learnable: returns the fixed encoding for positions 0..T-1, at any length."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, T: int) -> torch.Tensor:
        if T > len(self.table):  # past the precomputed table: the formula has no limit
            return sinusoidal_encoding(T, self.table.shape[1]).to(self.table.device)  # (T, D)
        return self.table[:T]  # (T, D)


class LearnedPositions(nn.Module):
    """One trained vector per position (BERT, GPT-2)."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    @property
    def table(self) -> torch.Tensor:
        return self.embedding.weight

    def forward(self, T: int) -> torch.Tensor:
        return self.embedding.weight[:T]  # (T, D)
