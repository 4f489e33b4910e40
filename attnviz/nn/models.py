"""Whole models built from the layers: an encoder, a text classifier, an encoder–decoder translator, a language model.

Corrects the seed: one ``Encoder``/``EncoderLayer`` each (the seed defines them twice with
different signatures), and the translator's decoder self-attention is causal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn as nn

from .layers import DecoderLayer, EncoderLayer, LayerNorm
from .positional import LearnedPositions, SinusoidalPositions


@dataclass
class TransformerConfig:
    """Sizes and choices of a built-in model; the defaults are the seed's (d_model 512, 8 heads …)."""

    vocab_size: int = 30522
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_layers: int = 6
    max_len: int = 512
    positional: str = "sinusoidal"  # or "learned"
    type_vocab_size: int = 0  # BERT's segment embeddings; 0 = none
    embed_norm: bool = False  # LayerNorm after the embedding sum (BERT)
    norm_first: bool = False  # pre-norm (GPT-2) instead of post-norm (the paper, BERT)
    activation: str = "relu"
    eps: float = 1e-5
    final_norm: bool = True  # a LayerNorm after the last layer (the seed's full Encoder)
    dropout: float = 0.1
    pad_id: int = 0
    n_classes: int = 0  # TextClassifier
    tgt_vocab_size: int = 0  # Translator; 0 = same as vocab_size

    def to_dict(self) -> dict:
        return asdict(self)


class StackOutput(NamedTuple):
    """What a stack of layers returns; lists have one entry per layer (hidden_states: L+1).

    Inside ``attnviz.capture.record.record`` the weights are None: the recorder has the queries and keys instead.
    """

    last: torch.Tensor  # (B, T, D), after the final norm when there is one
    hidden_states: list  # L+1 × (B, T, D): embeddings, then each layer's output
    attentions: list  # L × (B, H, T, T)
    cross_attentions: list = []  # L × (B, H, Tt, Ts), decoders only


class Embeddings(nn.Module):
    """Token + position (+ segment) embeddings, optional LayerNorm, dropout."""

    def __init__(self, c: TransformerConfig, vocab_size: int | None = None):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size or c.vocab_size, c.d_model, padding_idx=None)
        positions = {"sinusoidal": SinusoidalPositions, "learned": LearnedPositions}
        if c.positional not in positions:
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', not {c.positional!r}")
        self.positions = positions[c.positional](c.max_len, c.d_model)
        self.segments = nn.Embedding(c.type_vocab_size, c.d_model) if c.type_vocab_size else None
        self.norm = LayerNorm(c.d_model, c.eps) if c.embed_norm else None
        self.dropout = nn.Dropout(c.dropout)
        self.max_len = c.max_len if c.positional == "learned" else None  # sinusoids: any length

    def forward(self, ids):
        B, T = ids.shape
        if self.max_len is not None and T > self.max_len:
            raise ValueError(f"{T} tokens exceed the model's {self.max_len} positions")
        x = self.tokens(ids) + self.positions(T)  # (B, T, D)
        if self.segments is not None:
            x = x + self.segments.weight[0]  # a single segment: type id 0 everywhere
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


class Encoder(nn.Module):
    """N encoder layers with an optional final LayerNorm, over vectors (B, T, D)."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.norm_first, c.eps)
            for _ in range(c.n_layers)
        )
        self.norm = LayerNorm(c.d_model, c.eps) if c.final_norm else None

    def forward(self, x, mask=None, causal: bool = False) -> StackOutput:
        """``mask`` broadcasts to (B, H, T, T), True = may attend; ``causal`` hides later positions."""
        hidden, attns = [x], []
        for layer in self.layers:
            x, w = layer(x, mask, causal)
            hidden.append(x)
            attns.append(w)
        last = self.norm(x) if self.norm is not None else x
        return StackOutput(last, hidden, attns)


class Decoder(nn.Module):
    """N decoder layers (causal self-attention, cross-attention, FFN) with an optional final norm."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.norm_first, c.eps)
            for _ in range(c.n_layers)
        )
        self.norm = LayerNorm(c.d_model, c.eps) if c.final_norm else None

    def forward(self, x, memory, self_mask=None, memory_mask=None) -> StackOutput:
        hidden, attns, cross = [x], [], []
        for layer in self.layers:
            x, w, cw = layer(x, memory, self_mask, memory_mask)
            hidden.append(x)
            attns.append(w)
            cross.append(cw)
        last = self.norm(x) if self.norm is not None else x
        return StackOutput(last, hidden, attns, cross)


def padding_mask(attention_mask):
    """(B, T) 1/0 -> (B, 1, 1, T) boolean key mask, or None."""
    return None if attention_mask is None else attention_mask.bool()[:, None, None, :]


class EncoderModel(nn.Module):
    """Embeddings + Encoder: the shape of BERT and of the seed's encoder."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.config = c
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c)

    def forward(self, ids, attention_mask=None) -> StackOutput:
        """ids (B, T), attention_mask (B, T) with 1 for real tokens."""
        return self.encoder(self.embeddings(ids), padding_mask(attention_mask))


class TextClassifier(nn.Module):
    """The seed's classifier: an encoder, mean pooling over real tokens, a linear layer."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        if c.n_classes < 2:
            raise ValueError("a classifier needs n_classes ≥ 2")
        self.config = c
        self.encoder = EncoderModel(c)
        self.classifier = nn.Linear(c.d_model, c.n_classes)

    def forward(self, ids, attention_mask=None):
        """ids (B, T) -> (logits (B, n_classes), StackOutput)."""
        out = self.encoder(ids, attention_mask)
        keep = torch.ones_like(ids, dtype=out.last.dtype) if attention_mask is None else attention_mask.to(out.last.dtype)
        pooled = (out.last * keep[..., None]).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)  # (B, D)
        return self.classifier(pooled), out


class LanguageModel(nn.Module):
    """A decoder-only language model: the seed's decoder without cross-attention, i.e. embeddings, causal
    self-attention layers (``EncoderLayer`` with ``causal``), a final norm and a linear map to the vocabulary."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.config = c
        self.embeddings = Embeddings(c)
        self.decoder = Encoder(c)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size)

    def forward(self, ids, attention_mask=None):
        """ids (B, T) -> (next-token logits (B, T, V), StackOutput); row t predicts token t + 1."""
        out = self.decoder(self.embeddings(ids), padding_mask(attention_mask), causal=True)
        return self.lm_head(out.last), out


class Translator(nn.Module):
    """The seed's encoder–decoder translator, with a causal decoder."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.config = c
        self.encoder = EncoderModel(c)
        self.tgt_embeddings = Embeddings(c, c.tgt_vocab_size or c.vocab_size)
        self.decoder = Decoder(c)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size or c.vocab_size)

    def forward(self, src, tgt, src_mask=None):
        """src (B, Ts), tgt (B, Tt) -> (logits (B, Tt, V), encoder StackOutput, decoder StackOutput)."""
        enc = self.encoder(src, src_mask)
        dec = self.decoder(self.tgt_embeddings(tgt), enc.last, memory_mask=padding_mask(src_mask))
        return self.generator(dec.last), enc, dec

    @torch.no_grad()
    def greedy(self, src, bos: int, eos: int, max_len: int = 32, src_mask=None):
        """Greedy decoding -> (B, ≤ max_len + 1) target ids starting with ``bos``."""
        memory = self.encoder(src, src_mask).last
        tgt = torch.full((src.size(0), 1), bos, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            dec = self.decoder(self.tgt_embeddings(tgt), memory, memory_mask=padding_mask(src_mask))
            nxt = self.generator(dec.last[:, -1]).argmax(-1)  # (B,)
            nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
            tgt = torch.cat([tgt, nxt[:, None]], dim=1)
            done |= nxt == eos
            if done.all():
                break
        return tgt
