"""attnviz's own transformer, written from the seed tutorial and corrected."""

from .attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from .layers import DecoderLayer, EncoderLayer, LayerNorm, PositionwiseFeedForward, Residual
from .models import (
    Decoder,
    Embeddings,
    Encoder,
    EncoderModel,
    LanguageModel,
    StackOutput,
    TextClassifier,
    TransformerConfig,
    Translator,
)
from .positional import LearnedPositions, SinusoidalPositions, sinusoidal_encoding

__all__ = [
    "scaled_dot_product_attention", "causal_mask", "MultiHeadAttention",
    "LayerNorm", "PositionwiseFeedForward", "Residual", "EncoderLayer", "DecoderLayer",
    "Embeddings", "Encoder", "Decoder", "EncoderModel", "LanguageModel", "StackOutput", "TextClassifier", "Translator",
    "TransformerConfig", "sinusoidal_encoding", "SinusoidalPositions", "LearnedPositions",
]
