"""``builtin:lm``: the data it learns from and its training loop, with the induction score tracked over steps.

The data is generated here, from a seed: short stories of templated sentences in which earlier sentences
come back word for word (what an induction head completes: [A][B] … [A] → [B]), and, nine documents in ten,
a run of random words repeated (the standard probe's shape, so the heads that form generalise to any tokens).

    python -m attnviz.train lm            # 5,000 steps: 11 to 15 minutes on one busy core
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from ..analysis.roles import probe_trace, role_scores
from ..backends.lm import TrainedLM, build
from ..backends.vocab import BOS, SPECIALS, Vocab
from .loop import check_sizes, schedule, update

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
PROBE = "anna saw the red ball . then ben found the box in the garden . anna saw the red"


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


class LMProgress(NamedTuple):
    """What the callback sees: the step, the batch's loss and next-token accuracy, the probe's scores."""

    step: int
    steps: int
    loss: float
    accuracy: float
    induction: float | None  # at evaluations: the best head's induction score on the standard probe
    previous: float | None  # … and the best previous-token score
    model: object | None  # at evaluations: the TrainedLM as it is now
    seconds: float

    def row(self) -> dict:
        return {k: v for k, v in self._asdict().items() if k != "model"}


class TrainedLMResult(NamedTuple):
    model: object  # TrainedLM
    history: list
    induction: float
    previous: float
    seconds: float


def probe_scores(model) -> tuple[float, float]:
    """(best induction score, best previous-token score) over the heads, on the standard probe."""
    s = role_scores(probe_trace(model))
    return float(s["induction"].max()), float(s["previous"].max())


def train_lm(config: LMConfig | None = None, on_step: Callable[[LMProgress], None] | None = None,
             key: str = "trained:lm", threads: int | None = 1) -> TrainedLMResult:
    """Train a fresh language model on the generated stories; ``on_step`` every ``log_every`` steps and at
    evaluations. ``threads``: torch CPU threads while training (restored after)."""
    c = config or LMConfig()
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        torch.manual_seed(c.seed)
        rng = random.Random(c.seed)
        net = build(c, len(VOCAB))
        model = TrainedLM(key, net, VOCAB)
        opt = torch.optim.AdamW(net.parameters(), lr=c.lr, betas=(0.9, 0.98), weight_decay=0.01)
        sched = schedule(opt, c.warmup, c.steps)
        history, start, scores = [], time.perf_counter(), (0.0, 0.0)
        for step in range(1, c.steps + 1):
            net.train()
            ids = batch(rng, c.batch_size, c.max_len)  # (B, T)
            logits, _ = net(ids[:, :-1])  # (B, T − 1, V): row t predicts token t + 1
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
            update(net, opt, sched, loss)
            evaluating = step % c.eval_every == 0 or step == c.steps
            if evaluating:
                net.eval()
                scores = probe_scores(model)
            if evaluating or step % c.log_every == 0:
                acc = (logits.argmax(-1) == ids[:, 1:]).float().mean().item()
                p = LMProgress(step, c.steps, loss.item(), acc, *(scores if evaluating else (None, None)),
                               model if evaluating else None, time.perf_counter() - start)
                history.append(p.row())
                if on_step:
                    on_step(p)
        net.eval()
        seconds = time.perf_counter() - start
        model.info = {"task": "stories", "training": dataclasses.asdict(c), "induction": scores[0],
                      "previous": scores[1], "seconds": round(seconds, 1), "history": history}
        return TrainedLMResult(model, history, *scores, seconds)
    finally:
        torch.set_num_threads(before)
