"""``builtin:lm``: attnviz's own decoder-only language model, trained on generated stories (attnviz.training.lm).

A checkpoint is ``lm.safetensors`` (weights) beside ``lm.json`` (config, vocabulary, training log).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .generation import Generation, Sampling, top_next
from ..nn import LanguageModel, TransformerConfig
from .vocab import BOS, EOS, SPECIALS, Vocab
from ..core.trace import AttentionTrace
from .common import Encoded, Scorer, TorchBackend, check_text, log_odds
from .trained import CHECKPOINTS

DESCRIPTION = ("a {n_layers}-layer × {n_heads}-head decoder-only language model trained on attnviz's generated "
               "stories with repeated spans (best induction score on the probe {induction:.2f})")


def build(c, vocab_size: int) -> LanguageModel:
    """The language model at the sizes of an ``attnviz.training.lm.LMConfig``, over ``vocab_size`` tokens."""
    return LanguageModel(TransformerConfig(
        vocab_size=vocab_size, d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, n_layers=c.n_layers,
        max_len=c.max_len, positional=c.positional, norm_first=True, dropout=0.0, activation="gelu",
    ))


def pick(logits: torch.Tensor, s: Sampling, generator: torch.Generator) -> int:
    """The next token from logits (V,): the argmax, or a draw after temperature and top-k."""
    if s.greedy:
        return int(logits.argmax())
    logits = logits.double() / s.temperature
    if s.top_k:
        kth = logits.topk(min(s.top_k, logits.shape[-1])).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))


class TrainedLM(TorchBackend):
    """A LanguageModel over words; texts start with [BOS]."""

    kind = "decoder"
    abilities = frozenset({"generate", "token_ids", "outputs", "ablation", "positions", "scorer"})

    def __init__(self, key: str, net: LanguageModel, vocab: Vocab, description: str = "", info: dict | None = None):
        self.key, self.net, self.vocab, self.description = key, net.eval(), vocab, description
        self.info = info or {}
        c = net.config
        self.n_layers, self.n_heads = c.n_layers, c.n_heads
        self.position_limit = c.max_len  # the context it was trained on
        self.lock = threading.Lock()
        self.bos = vocab.stoi[BOS]

    def plain_ids(self) -> list[int]:
        return list(range(len(SPECIALS), len(self.vocab)))

    def _encoded(self, ids: list, truncated: int = 0) -> Encoded:
        tokens = tuple(self.vocab.itos[i] for i in ids)
        return Encoded(ids, tokens, np.array([t in SPECIALS for t in tokens]), None, truncated)

    def _ids(self, text: str, limit: int) -> tuple[list, int]:
        """([BOS] + the text's word ids, cut to ``limit``; how many were cut)."""
        ids = [self.bos, *self.vocab.ids(self.vocab.tokens(check_text(text)))]
        return ids[:limit], max(0, len(ids) - limit)

    def _run(self, enc: Encoded, text: str) -> tuple[AttentionTrace, torch.Tensor]:
        """(trace, next-token logits (T, V)) of one recorded forward."""
        with self.recorded() as run:
            logits, out = self.net(torch.tensor([enc.ids]))  # (1, T, V)
        return run.trace(enc, text, "decoder", out.hidden_states), logits[0]

    def trace(self, text: str, target: str | None = None, max_tokens: int | None = None) -> AttentionTrace:
        ids, cut = self._ids(text, self.limit(max_tokens))
        return self._run(self._encoded(ids, cut), text)[0]

    def trace_ids(self, ids: list, add_special_tokens: bool = True) -> AttentionTrace:
        """The trace of word ids as given (``add_special_tokens``: after [BOS])."""
        ids = [self.bos, *ids] if add_special_tokens else list(ids)
        if not 0 < len(ids) <= self.max_tokens:
            raise ValueError(f"{len(ids)} tokens: this model takes 1 to {self.max_tokens:,}.")
        return self._run(self._encoded(ids), self.vocab.decode(ids))[0]

    def scorer(self, text: str, target: str | None = None, max_tokens: int | None = None) -> Scorer:
        """The log-odds of the next token after the text: the predicted one, or ``target`` (a word)."""
        ids, _ = self._ids(text, self.limit(max_tokens))
        if target is None:
            with self.lock, torch.inference_mode():
                t = int(self.net(torch.tensor([ids]))[0][0, -1].argmax())
        elif (t := self.vocab.stoi.get(str(target).strip().lower())) is None or self.vocab.itos[t] in SPECIALS:
            raise ValueError(f"{target!r} is not a word of this model's vocabulary: choose another next token.")
        return self.scoring(ids, self.net.embeddings.tokens, lambda x: log_odds(self.net(x)[0][:, -1], t),
                            target=f"log-odds of the next token {self.vocab.itos[t]!r}", probability=True,
                            position=len(ids) - 1)

    def run_with_trace(self, text) -> tuple[AttentionTrace, torch.Tensor]:
        """(trace, next-token logits (T, V)) of a text, or of word ids (a list, after [BOS]), in one forward."""
        if isinstance(text, str):
            ids, cut = self._ids(text, self.limit())
            return self._run(self._encoded(ids, cut), text)
        ids = [self.bos, *text]
        if not 1 < len(ids) <= self.max_tokens:
            raise ValueError(f"{len(ids)} tokens: this model takes 2 to {self.max_tokens:,}.")
        return self._run(self._encoded(ids), self.vocab.decode(ids))

    def generate(self, prompt: str, sampling: Sampling | None = None, on_step=None) -> Generation:
        """Continue ``prompt`` token by token (the whole prefix again each step: the model is tiny and its
        context short), then trace prompt + continuation in one forward. ``on_step(done, most)`` after each new
        token; an exception it raises stops the generation there."""
        s = sampling or Sampling()
        ids, _ = self._ids(prompt, self.max_tokens)
        prompt_len = len(ids)
        if prompt_len >= self.max_tokens:
            raise ValueError(f"The prompt fills all {self.max_tokens:,} positions: shorten it to leave room.")
        generator = torch.Generator().manual_seed(s.seed)
        eos = self.vocab.stoi[EOS]
        with self.lock, torch.inference_mode():
            most = min(s.max_new_tokens, self.max_tokens - prompt_len)
            for step in range(most):
                logits, _ = self.net(torch.tensor([ids]))  # (1, T, V)
                ids.append(pick(logits[0, -1], s, generator))
                if on_step is not None:
                    on_step(step + 1, most)
                if ids[-1] == eos:
                    break
        trace, logits = self._run(self._encoded(ids), self.vocab.decode(ids))
        top_ids, top_probs = top_next(logits[prompt_len - 1:-1])  # rows predicting each new token
        tokens = tuple(tuple(self.vocab.itos[i] for i in row) for row in top_ids.tolist())
        return Generation(trace, prompt_len, self.vocab.decode(ids[prompt_len:]), top_ids, tokens, top_probs, s)

    def ablation(self, text: str, max_tokens: int | None = None):
        """("lm", run): the mean next-token loss with heads scaled by ``head_mask`` (L, H)."""
        ids, _ = self._ids(text, self.limit(max_tokens))
        if len(ids) < 2:
            raise ValueError("The next-token loss needs at least one word after [BOS]: enter a longer text.")
        x = torch.tensor([ids])  # (1, T)
        return "lm", self.masked_run(lambda: F.cross_entropy(self.net(x)[0][0, :-1].double(), x[0, 1:]))

    def to_json(self) -> dict:
        return {"kind": self.kind, "description": self.description, "config": self.net.config.to_dict(),
                "vocab": self.vocab.to_json(), **self.info}


def load_lm(stem: Path, key: str) -> TrainedLM:
    """``builtin:lm`` from ``stem.safetensors`` + ``stem.json`` (safetensors only, never pickle)."""
    from safetensors.torch import load_file

    stem = Path(stem)
    meta = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    net = LanguageModel(TransformerConfig(**meta["config"]))
    net.load_state_dict(load_file(stem.with_suffix(".safetensors")))
    info = {k: v for k, v in meta.items() if k not in ("kind", "description", "config", "vocab")}
    return TrainedLM(key, net, Vocab.from_json(meta["vocab"]), meta["description"], info)


LM = {"builtin:lm": lambda: load_lm(CHECKPOINTS / "lm", "builtin:lm")}
