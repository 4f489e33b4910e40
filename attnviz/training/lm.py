"""``builtin:lm``: the data it learns from and its training loop, with the induction score tracked over steps.

The data is generated here, from a seed: short stories of templated sentences in which earlier sentences
come back word for word (what an induction head completes: [A][B] … [A] → [B]), and, nine documents in ten,
a run of random words repeated (the standard probe's shape, so the heads that form generalise to any tokens).

    python -m attnviz.train lm            # 5,000 steps: 11 to 15 minutes on one busy core
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ..analysis.roles import probe_trace, role_scores
from ..backends.lm import TrainedLM, build
from ..backends.vocab import BOS, SPECIALS, Vocab
from .loop import Progress, Run, Trained, check_sizes, fit

NAMES = ("anna", "ben", "cleo", "dan", "eva", "finn", "gus", "hana", "ivan", "jo", "kim", "leo", "mia", "nils")
NOUNS = ("cat", "dog", "bird", "fox", "ball", "box", "tree", "house", "river", "boat", "hat", "cake", "book",
         "lamp", "door", "garden", "apple", "moon", "star", "road", "hill", "shop", "cup", "bell")
ADJECTIVES = ("red", "big", "small", "old", "new", "green", "happy", "sleepy", "quiet", "loud", "blue", "tiny",
              "brave", "warm", "cold", "round")
VERBS = ("saw", "found", "liked", "took", "painted", "lost", "carried", "opened", "watched", "made", "wanted",
         "kept")
PLACES = ("in the garden", "by the river", "near the house", "on the hill", "at the shop", "under the tree")
TEMPLATES = (
    "{name} {verb} the {adj} {noun} .",
    "the {adj} {noun} was {place} .",
    "{name} and {name2} {verb} a {noun} .",
    "then {name} {verb} the {noun} {place} .",
    "the {noun} was {adj} , and the {noun2} was {adj2} .",
    "one day {name} {verb} a {adj} {noun} {place} .",
)
WORDS = sorted({w for t in TEMPLATES for w in t.split() if not w.startswith("{")}
               | {w for p in PLACES for w in p.split()} | set(NAMES) | set(NOUNS) | set(ADJECTIVES) | set(VERBS))
VOCAB = Vocab([*SPECIALS, *WORDS])
PROMPT = "anna saw the red ball . then ben found the box in the garden . anna saw the red"


def sentence(rng: random.Random) -> list[str]:
    """One templated sentence, as words."""
    return rng.choice(TEMPLATES).format(
        name=rng.choice(NAMES), name2=rng.choice(NAMES), verb=rng.choice(VERBS), adj=rng.choice(ADJECTIVES),
        adj2=rng.choice(ADJECTIVES), noun=rng.choice(NOUNS), noun2=rng.choice(NOUNS), place=rng.choice(PLACES),
    ).split()


def document(rng: random.Random, length: int) -> list[str]:
    """``length`` words: a story whose sentences often repeat an earlier one, or a random run repeated."""
    if rng.random() < 0.9:
        # Runs of 3 to 50 words, log-uniform: short runs repeat many times (the signal that makes induction
        # heads form at all), long ones teach them to reach as far back as the probe's 50.
        run = rng.sample(WORDS, int(round(3 * (50 / 3) ** rng.random())))
        return (run * (length // len(run) + 1))[:length]
    words: list[list[str]] = []
    while sum(map(len, words)) < length:
        words.append(rng.choice(words) if words and rng.random() < 0.4 else sentence(rng))
    return [w for s in words for w in s][:length]


def batch(rng: random.Random, size: int, length: int) -> torch.Tensor:
    """(size, length) ids, each row [BOS] then a document."""
    bos = VOCAB.stoi[BOS]
    return torch.tensor([[bos, *VOCAB.ids(document(rng, length - 1))] for _ in range(size)])


@dataclass
class LMConfig:
    """The language model's size and optimisation; pre-norm (trains without warm-up tricks), learned positions.

    Learned positions and two heads of width 32 per layer: with sinusoidal positions and four heads of width 16,
    layer 0 spread the previous token over four heads that each also looked a few tokens further back (best
    previous-token score 0.36 after 5,000 steps); this way one head attends to it (0.82).
    """

    steps: int = 5000
    batch_size: int = 16
    d_model: int = 64
    n_heads: int = 2
    n_layers: int = 2
    d_ff: int = 64
    max_len: int = 112  # the probe is [BOS] + 2 × 50 words; learned positions: the model takes no more
    positional: str = "learned"
    lr: float = 3e-3
    warmup: int = 50
    eval_every: int = 25  # the induction and previous-token scores on the probe, every so many steps
    log_every: int = 10
    seed: int = 0

    def __post_init__(self):
        check_sizes(self)
        if self.max_len < 8:
            raise ValueError("the context must hold at least 8 tokens")


def probe_scores(model) -> dict:
    """The best head's induction and previous-token scores on the standard probe."""
    s = role_scores(probe_trace(model))
    return {"induction": float(s["induction"].max()), "previous": float(s["previous"].max())}


def train_lm(config: LMConfig | None = None, on_step: Callable[[Progress], None] | None = None,
             key: str = "trained:lm", threads: int | None = 1) -> Trained:
    """Train a fresh language model on the generated stories through the one loop (``loop.fit``); its scores are
    ``probe_scores``. ``on_step``, ``threads``: see fit."""
    c = config or LMConfig()

    def setup() -> Run:
        net = build(c, len(VOCAB))
        model = TrainedLM(key, net, VOCAB)

        def loss(rng: random.Random) -> tuple[torch.Tensor, float]:
            ids = batch(rng, c.batch_size, c.max_len)  # (B, T)
            logits, _ = net(ids[:, :-1])  # (B, T − 1, V): row t predicts token t + 1
            accuracy = (logits.argmax(-1) == ids[:, 1:]).float().mean().item()
            return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()), accuracy

        opt = torch.optim.AdamW(net.parameters(), lr=c.lr, betas=(0.9, 0.98), weight_decay=0.01)
        return Run("stories", model, opt, loss, ("induction", "previous"), lambda: probe_scores(model), {})

    return fit(c, setup, on_step, threads)
