"""The trained examples as backends: ``builtin:classifier`` and ``builtin:translator``.

A checkpoint is two files side by side: ``<name>.safetensors`` (the weights) and ``<name>.json``
(the model's TransformerConfig, its vocabularies and labels, how it was trained).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import torch

from ..nn import TextClassifier, TransformerConfig, Translator
from ..tasks import BOS, EOS, SPECIALS, Vocab
from ..trace import AttentionTrace, Seq2SeqTrace
from .common import check_text

CHECKPOINTS = Path(__file__).resolve().parent.parent / "checkpoints"


def _stack_trace(out, tokens, special, model, kind, text, truncated) -> AttentionTrace:
    """One stack's StackOutput (batch of one, run with stats) as a trace."""
    return AttentionTrace(
        tokens=tokens,
        attentions=torch.cat(out.attentions).numpy(),  # L × (1, H, T, T) -> (L, H, T, T)
        hidden_states=torch.cat(out.hidden_states).numpy(),  # (L+1, T, D)
        norms={k: v[0].numpy() for k, v in out.stats.items()},
        special=special,
        model=model,
        kind=kind,
        text=text,
        truncated=truncated,
    )


class _Trained:
    """What both trained backends share: a small net, a word-level source vocabulary, a lock."""

    def __init__(self, key: str, net, source: Vocab, description: str = "", info: dict | None = None):
        self.key, self.net, self.source, self.description = key, net.eval(), source, description
        self.info = info or {}  # how it was trained and what it scored, for display
        c = net.config
        self.n_layers, self.n_heads, self.max_tokens = c.n_layers, c.n_heads, c.max_len
        self.lock = threading.Lock()

    def _source(self, text: str) -> tuple[list[str], torch.Tensor, int]:
        """(tokens, ids (1, T), how many tokens were cut) for a checked text."""
        tokens = self.source.tokens(check_text(text))
        kept = tokens[: self.max_tokens]
        return kept, torch.tensor([self.source.ids(kept)]), len(tokens) - len(kept)

    def to_json(self) -> dict:
        return {"kind": self.kind, "description": self.description, "config": self.net.config.to_dict(),
                "source": self.source.to_json(), **self.info}


class TrainedClassifier(_Trained):
    """A TextClassifier over words; ``predict`` gives the label probabilities."""

    kind = "encoder"

    def __init__(self, key, net: TextClassifier, source: Vocab, labels, description="", info=None):
        super().__init__(key, net, source, description, info)
        if len(labels) != net.config.n_classes:
            raise ValueError(f"{len(labels)} labels for a classifier with {net.config.n_classes} classes")
        self.labels = tuple(labels)

    def trace(self, text: str, target: str | None = None) -> AttentionTrace:
        tokens, ids, cut = self._source(text)
        with self.lock, torch.inference_mode():
            _, out = self.net(ids, stats=True)
        return _stack_trace(out, tokens, None, self.key, "encoder", text, cut)

    def predict(self, text: str) -> dict[str, float]:
        """label -> probability."""
        _, ids, _ = self._source(text)
        with self.lock, torch.inference_mode():
            logits, _ = self.net(ids)
        return dict(zip(self.labels, logits[0].softmax(-1).tolist()))

    def to_json(self) -> dict:
        return {**super().to_json(), "labels": list(self.labels)}


class TrainedTranslator(_Trained):
    """A Translator over words; ``translate`` decodes greedily, ``trace`` shows all three attentions."""

    kind = "encoder-decoder"

    def __init__(self, key, net: Translator, source: Vocab, target: Vocab, description="", info=None):
        super().__init__(key, net, source, description, info)
        self.target = target
        self.bos, self.eos = target.stoi[BOS], target.stoi[EOS]

    def _greedy(self, src: torch.Tensor) -> list[int]:
        # BOS plus at most max_len − 1 tokens fills the decoder's positions exactly.
        return self.net.greedy(src, self.bos, self.eos, max_len=self.max_tokens - 1)[0].tolist()

    def translate(self, text: str) -> str:
        _, src, _ = self._source(text)
        with self.lock, torch.inference_mode():
            return self.target.decode(self._greedy(src))

    def trace(self, text: str, target: str | None = None) -> Seq2SeqTrace:
        """Source self-attention, decoder self-attention and cross-attention over [BOS] target [EOS].

        Row i of the decoder (and of the cross-attention) is the query that predicts target token i + 1.
        """
        tokens, src, cut = self._source(text)
        tgt_cut = 0
        if target is not None:
            if not isinstance(target, str) or not target.strip():
                raise ValueError("The target text is empty: leave it out to see the model's own translation.")
            words = self.target.tokens(target)
            kept = words[: self.max_tokens - 2]  # room for [BOS] and [EOS]
            tgt_cut = len(words) - len(kept)
        with self.lock, torch.inference_mode():
            ids = self._greedy(src) if target is None else [self.bos, *self.target.ids(kept), self.eos]
            _, enc, dec = self.net(src, torch.tensor([ids]), stats=True)
            cross = torch.cat(dec.cross_attentions).numpy()  # L × (1, H, Tt, Ts) -> (L, H, Tt, Ts)
        tgt_tokens = [self.target.itos[i] for i in ids]
        special = [t in SPECIALS for t in tgt_tokens]
        return Seq2SeqTrace(
            encoder=_stack_trace(enc, tokens, None, self.key, "encoder", text, cut),
            decoder=_stack_trace(dec, tgt_tokens, special, self.key, "decoder", self.target.decode(ids), tgt_cut),
            cross_attentions=cross,
            generated=target is None,
        )

    def to_json(self) -> dict:
        return {**super().to_json(), "target": self.target.to_json()}


def save_checkpoint(backend: _Trained, stem: Path) -> tuple[Path, Path]:
    """Write ``stem.safetensors`` and ``stem.json``; returns both paths."""
    from safetensors.torch import save_file

    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    weights, config = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
    save_file({k: v.contiguous() for k, v in backend.net.state_dict().items()}, weights)
    config.write_text(json.dumps(backend.to_json(), indent=1, ensure_ascii=False), encoding="utf-8")
    return weights, config


def load_checkpoint(stem: Path, key: str) -> _Trained:
    """A trained backend from ``stem.safetensors`` + ``stem.json`` (safetensors only, never pickle)."""
    from safetensors.torch import load_file

    stem = Path(stem)
    meta = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    config = TransformerConfig(**meta["config"])
    info = {k: v for k, v in meta.items() if k not in ("kind", "description", "config", "source", "target", "labels")}
    source = Vocab.from_json(meta["source"])
    if meta["kind"] == "encoder":
        net = TextClassifier(config)
        backend = TrainedClassifier(key, net, source, meta["labels"], meta["description"], info)
    else:
        net = Translator(config)
        backend = TrainedTranslator(key, net, source, Vocab.from_json(meta["target"]), meta["description"], info)
    net.load_state_dict(load_file(stem.with_suffix(".safetensors")))
    return backend


TRAINED = {
    "builtin:classifier": lambda: load_checkpoint(CHECKPOINTS / "classifier", "builtin:classifier"),
    "builtin:translator": lambda: load_checkpoint(CHECKPOINTS / "translator", "builtin:translator"),
}
