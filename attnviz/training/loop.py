"""The one training loop (``fit``), which every built-in model goes through, and the seed's models on the generated
tasks (``train``); the language model's data is attnviz/training/lm.py, the command line attnviz/training/cli.py."""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from ..backends.trained import TrainedClassifier, TrainedTranslator
from ..nn import TextClassifier, TransformerConfig, Translator
from ..backends.vocab import BOS, EOS
from .tasks import TASKS, Example, Task

EVAL_SEED = 1_000_003  # held-out examples come from this seed, training batches from TrainConfig.seed


@dataclass
class TrainConfig:
    """Model size and optimisation; the architecture is the seed's (post-norm, sinusoidal, ReLU)."""

    steps: int = 1500
    batch_size: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    max_len: int = 64
    lr: float = 3e-3
    warmup: int = 100
    eval_every: int = 250  # held-out evaluation (and the callback's model) every so many steps
    eval_size: int = 400
    log_every: int = 10  # the callback runs every so many steps, and at every evaluation
    seed: int = 0

    def __post_init__(self):
        check_sizes(self)


def check_sizes(config) -> None:
    """What every training configuration needs (TrainConfig, lm.LMConfig): at least one step and one example
    a batch, and a model width the heads divide."""
    if config.steps < 1 or config.batch_size < 1:
        raise ValueError("steps and batch size must be at least 1")
    if config.d_model % config.n_heads:
        raise ValueError(f"the model width {config.d_model} must be divisible by the {config.n_heads} heads")


class Progress(NamedTuple):
    """What the callback sees: the step, the training batch's loss and accuracy, the evaluation's scores."""

    step: int  # 1-based
    steps: int
    loss: float
    accuracy: float  # on the training batch (per target token for the translator and the language model)
    scores: dict  # name -> score at evaluations (eval_accuracy; induction, previous), name -> None between them
    model: object | None  # at evaluations: the backend as it is now, in eval mode
    seconds: float

    def row(self) -> dict:
        """The numbers alone, as one row of the training history: each score a column of its own."""
        return {"step": self.step, "steps": self.steps, "loss": self.loss, "accuracy": self.accuracy,
                **self.scores, "seconds": self.seconds}


class Trained(NamedTuple):
    """A finished run: the backend, its history (Progress.row() every ``log_every`` steps and at evaluations),
    the last evaluation's scores and the seconds it took."""

    model: object  # TrainedClassifier, TrainedTranslator or TrainedLM
    history: list
    scores: dict
    seconds: float


class Run(NamedTuple):
    """What one model's training brings to the loop; the loop itself is the same for every model."""

    task: str  # the name model.info records
    model: object  # the backend around the net being trained (its ``net``)
    optimizer: torch.optim.Optimizer
    loss: Callable[[random.Random], tuple[torch.Tensor, float]]  # a fresh batch -> (loss, batch accuracy)
    scores: tuple[str, ...]  # the names of the scores ``evaluate`` gives
    evaluate: Callable[[], dict]  # name -> score, with the net in eval mode
    info: dict  # more for model.info


def fit(config, setup: Callable[[], Run], on_step: Callable[[Progress], None] | None = None,
        threads: int | None = 1) -> Trained:
    """Seed, build the run (``setup()``), then ``config.steps`` updates with warm-up and cosine decay; evaluations
    every ``eval_every`` steps and at the last; ``on_step`` every ``log_every`` steps and at evaluations.

    ``threads``: torch CPU threads while training (restored after; None leaves them) — these small models run
    best on one, and more threads spin when the cores are shared (measured 20× slower with 2 on 2 busy cores).
    """
    c = config
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        torch.manual_seed(c.seed)
        rng = random.Random(c.seed)
        run = setup()
        net = run.model.net
        sched = schedule(run.optimizer, c.warmup, c.steps)
        history, start, scores = [], time.perf_counter(), {}
        for step in range(1, c.steps + 1):
            net.train()
            loss, acc = run.loss(rng)
            update(net, run.optimizer, sched, loss)
            evaluating = step % c.eval_every == 0 or step == c.steps
            if evaluating:
                net.eval()
                scores = run.evaluate()
            if evaluating or step % c.log_every == 0:
                p = Progress(step, c.steps, loss.item(), acc, scores if evaluating else dict.fromkeys(run.scores),
                             run.model if evaluating else None, time.perf_counter() - start)
                history.append(p.row())
                if on_step:
                    on_step(p)
        net.eval()
        seconds = time.perf_counter() - start
        run.model.info = {"task": run.task, "training": dataclasses.asdict(c), **scores, **run.info,
                          "seconds": round(seconds, 1), "history": history}
        return Trained(run.model, history, scores, seconds)
    finally:
        torch.set_num_threads(before)


def _task(task: str | Task) -> Task:
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose from {', '.join(TASKS)}")
    return TASKS[task]


def _pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])  # (B, T), PAD is id 0


def batch(task: Task, examples: list[Example]) -> dict:
    """Padded tensors for a list of examples (classifier: ids, mask, labels; translator: src, mask, tgt)."""
    src = _pad([task.source.ids(e.source) for e in examples])  # (B, Ts)
    b = {"src": src, "mask": (src != 0).long()}
    if task.kind == "classifier":
        b["labels"] = torch.tensor([task.labels.index(e.target) for e in examples])  # (B,)
    else:
        bos, eos = task.target.stoi[BOS], task.target.stoi[EOS]
        b["tgt"] = _pad([[bos, *task.target.ids(e.target), eos] for e in examples])  # (B, Tt + 2)
    return b


def build(task: Task, c: TrainConfig) -> TextClassifier | Translator:
    """The seed's architecture at the configured size, for ``task``."""
    config = TransformerConfig(
        vocab_size=len(task.source), d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, n_layers=c.n_layers,
        max_len=c.max_len, dropout=0.0, pad_id=0,  # endless fresh examples: nothing to regularise
        n_classes=len(task.labels), tgt_vocab_size=len(task.target) if task.target else 0,
    )
    return TextClassifier(config) if task.kind == "classifier" else Translator(config)


def _loss(task: Task, net, b: dict) -> tuple[torch.Tensor, float]:
    """(cross-entropy, accuracy) on one batch; the translator's are per target token, padding ignored."""
    if task.kind == "classifier":
        logits, _ = net(b["src"], b["mask"])  # (B, C)
        return F.cross_entropy(logits, b["labels"]), (logits.argmax(-1) == b["labels"]).float().mean().item()
    tgt_in, tgt_out = b["tgt"][:, :-1], b["tgt"][:, 1:]  # teacher forcing: predict token t + 1 from ≤ t
    logits, _, _ = net(b["src"], tgt_in, b["mask"])  # (B, Tt, V)
    loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0)
    real = tgt_out != 0
    return loss, (logits.argmax(-1) == tgt_out)[real].float().mean().item()


@torch.no_grad()
def evaluate(model: TrainedClassifier | TrainedTranslator, task: Task, examples: list[Example]) -> float:
    """Held-out accuracy (classifier) or exact-match rate of the greedy output (translator), batched."""
    b = batch(task, examples)
    net = model.net
    with model.lock:
        if task.kind == "classifier":
            logits, _ = net(b["src"], b["mask"])
            return (logits.argmax(-1) == b["labels"]).float().mean().item()
        out = net.greedy(b["src"], model.bos, model.eos, max_len=b["tgt"].size(1) - 1, src_mask=b["mask"])
    want = b["tgt"]  # (B, W) with [BOS] … [EOS] then padding
    width = max(out.size(1), want.size(1))
    out, want = F.pad(out, (0, width - out.size(1)), value=-1), F.pad(want, (0, width - want.size(1)))
    return ((out == want) | (want == 0)).all(1).float().mean().item()  # equal wherever the target is real


def wrap(task: Task, net, key: str, description: str = "", info: dict | None = None):
    """The backend around a built-in net for ``task``."""
    if task.kind == "classifier":
        return TrainedClassifier(key, net, task.source, task.labels, description, info)
    return TrainedTranslator(key, net, task.source, task.target, description, info)


def train(
    task: str | Task,
    config: TrainConfig | None = None,
    on_step: Callable[[Progress], None] | None = None,
    key: str | None = None,
    threads: int | None = 1,
) -> Trained:
    """Train a fresh model on ``task`` and return it as a backend named ``key``, with its history; its score is
    ``eval_accuracy``, the held-out accuracy (exact match for the translator). ``on_step``, ``threads``: see fit."""
    task, c = _task(task), config or TrainConfig()

    def setup() -> Run:
        net = build(task, c)
        held_out = task.examples(c.eval_size, EVAL_SEED)
        model = wrap(task, net, key or f"trained:{task.kind}")
        opt = torch.optim.Adam(net.parameters(), lr=c.lr, betas=(0.9, 0.98))
        return Run(task.name, model, opt,
                   lambda rng: _loss(task, net, batch(task, task.examples(c.batch_size, rng.getrandbits(32)))),
                   ("eval_accuracy",), lambda: {"eval_accuracy": evaluate(model, task, held_out)},
                   {"eval_seed": EVAL_SEED})

    return fit(c, setup, on_step, threads)


def schedule(opt, warmup: int, steps: int):
    """Linear warm-up (post-norm needs it), then cosine decay to a tenth: the last steps settle."""
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.55 + 0.45 * math.cos(math.pi * s / steps)))


def update(net, opt, sched, loss) -> None:
    """One optimiser step on ``loss``, gradients clipped to norm 1."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    sched.step()


DESCRIPTIONS = {
    "classifier": "a {n_layers}-layer × {n_heads}-head classifier trained on attnviz's generated sentiment "
                  "task ({eval_accuracy:.1%} held-out accuracy)",
    "translator": "a {n_layers}-layer × {n_heads}-head encoder–decoder trained to write dates as ISO 8601 "
                  "({eval_accuracy:.1%} exact match on held-out dates)",
}
