"""The trained examples as backends: ``builtin:classifier`` and ``builtin:translator``.

A checkpoint is two files side by side: ``<name>.safetensors`` (the weights) and ``<name>.json``
(the model's TransformerConfig, its vocabularies and labels, how it was trained).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import torch

from ..nn import TextClassifier, TransformerConfig, Translator
from .vocab import BOS, EOS, SPECIALS, Vocab
from ..core.trace import AttentionTrace, Seq2SeqTrace
from .common import Encoded, Scorer, TorchBackend, check_text, log_odds

CHECKPOINTS = Path(__file__).resolve().parent.parent / "checkpoints"
ENCODER_DECODER_ABLATION = "Head ablation covers encoders and causal LMs; encoder–decoder models are not supported."


class _Trained(TorchBackend):
    """What both trained backends share: a small net, a word-level source vocabulary, a lock."""

    def __init__(self, key: str, net, source: Vocab, description: str = "", info: dict | None = None):
        self.key, self.net, self.source, self.description = key, net.eval(), source, description
        self.info = info or {}  # how it was trained and what it scored, for display
        c = net.config
        self.n_layers, self.n_heads, self.position_limit = c.n_layers, c.n_heads, c.max_len
        self.lock = threading.Lock()


    def _source(self, text: str, max_tokens: int | None = None) -> tuple[Encoded, torch.Tensor]:
        """(the words kept, their ids (1, T)) for a checked text."""
        tokens = self.source.tokens(check_text(text))
        kept = tokens[: self.limit(max_tokens)]
        ids = self.source.ids(kept)
        return Encoded(ids, tuple(kept), None, None, len(tokens) - len(kept)), torch.tensor([ids])

    def to_json(self) -> dict:
        return {"kind": self.kind, "description": self.description, "config": self.net.config.to_dict(),
                "source": self.source.to_json(), **self.info}


class TrainedClassifier(_Trained):
    """A TextClassifier over words; ``predict`` gives the label probabilities."""

    kind = "encoder"
    abilities = frozenset({"outputs", "ablation", "positions", "scorer", "predict"})

    def __init__(self, key, net: TextClassifier, source: Vocab, labels, description="", info=None):
        super().__init__(key, net, source, description, info)
        if len(labels) != net.config.n_classes:
            raise ValueError(f"{len(labels)} labels for a classifier with {net.config.n_classes} classes")
        self.labels = tuple(labels)

    def trace(self, text: str, target: str | None = None, max_tokens: int | None = None) -> AttentionTrace:
        enc, ids = self._source(text, max_tokens)
        with self.recorded() as run:
            _, out = self.net(ids)
        return run.trace(enc, text, "encoder", out.hidden_states)

    def ablation(self, text: str, max_tokens: int | None = None):
        """("classifier", run): the class probabilities with heads scaled by ``head_mask`` (L, H)."""
        _, ids = self._source(text, max_tokens)
        return "classifier", self.masked_run(lambda: self.net(ids)[0][0].double().softmax(-1))  # (n_classes,)

    def scorer(self, text: str, target: str | None = None, max_tokens: int | None = None) -> Scorer:
        """The log-odds of the predicted label (or ``target``, a label), read from every position's mean."""
        enc, ids = self._source(text, max_tokens)
        if target is None:
            with self.lock, torch.inference_mode():
                target = self.labels[int(self.net(ids)[0][0].argmax())]
        if target not in self.labels:
            raise ValueError(f"Unknown label {target!r}: this classifier's labels are {', '.join(self.labels)}.")
        c = self.labels.index(target)
        return self.scoring(enc.ids, self.net.encoder.embeddings.tokens, lambda x: log_odds(self.net(x)[0], c),
                            target=f"log-odds of {target}", probability=True, position=None)

    def run_with_trace(self, text: str) -> tuple[AttentionTrace, torch.Tensor]:
        """(trace, label probabilities (C,)) of one text in one forward."""
        enc, ids = self._source(text)
        with self.recorded() as run:
            logits, out = self.net(ids)
        return run.trace(enc, text, "encoder", out.hidden_states), logits[0].double().softmax(-1)

    def predict(self, text: str) -> dict[str, float]:
        """label -> probability."""
        _, ids = self._source(text)
        with self.lock, torch.inference_mode():
            logits, _ = self.net(ids)
        return dict(zip(self.labels, logits[0].softmax(-1).tolist()))

    def to_json(self) -> dict:
        return {**super().to_json(), "labels": list(self.labels)}


class TrainedTranslator(_Trained):
    """A Translator over words; ``translate`` decodes greedily, ``trace`` shows all three attentions."""

    kind = "encoder-decoder"
    abilities = frozenset({"positions", "translate"})

    def __init__(self, key, net: Translator, source: Vocab, target: Vocab, description="", info=None):
        super().__init__(key, net, source, description, info)
        self.target = target
        self.bos, self.eos = target.stoi[BOS], target.stoi[EOS]

    def _greedy(self, src: torch.Tensor) -> list[int]:
        # BOS plus at most max_len − 1 tokens fills the decoder's positions exactly.
        return self.net.greedy(src, self.bos, self.eos, max_len=self.max_tokens - 1)[0].tolist()

    def translate(self, text: str) -> str:
        _, src = self._source(text)
        with self.lock, torch.inference_mode():
            return self.target.decode(self._greedy(src))

    def trace(self, text: str, target: str | None = None, max_tokens: int | None = None) -> Seq2SeqTrace:
        """Source self-attention, decoder self-attention and cross-attention over [BOS] target [EOS].

        Row i of the decoder (and of the cross-attention) is the query that predicts target token i + 1.
        """
        source, src = self._source(text, max_tokens)
        tgt_cut = 0
        if target is not None:
            if not isinstance(target, str) or not target.strip():
                raise ValueError("The target text is empty: leave it out to see the model's own translation.")
            words = self.target.tokens(target)
            kept = words[: self.max_tokens - 2]  # room for [BOS] and [EOS]
            tgt_cut = len(words) - len(kept)
        if target is None:
            with self.lock, torch.inference_mode():
                ids = self._greedy(src)
        else:
            ids = [self.bos, *self.target.ids(kept), self.eos]
        with self.recorded() as run:
            _, enc, dec = self.net(src, torch.tensor([ids]))
        tokens = tuple(self.target.itos[i] for i in ids)
        target_enc = Encoded(ids, tokens, np.array([t in SPECIALS for t in tokens]), None, tgt_cut)
        return Seq2SeqTrace(
            encoder=run.trace(source, text, "encoder", enc.hidden_states, "encoder"),
            decoder=run.trace(target_enc, self.target.decode(ids), "decoder", dec.hidden_states, "decoder"),
            cross=run.recorder.weights("cross"),
            generated=target is None,
        )

    def ablation(self, text: str, max_tokens: int | None = None):
        raise ValueError(ENCODER_DECODER_ABLATION)

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
