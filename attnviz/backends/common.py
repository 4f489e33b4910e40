"""What every backend shares: checking text, tokenizing with truncation, the Backend interface."""

from __future__ import annotations

import logging
import os
import re
import threading
from bisect import bisect_right
from contextlib import contextmanager, nullcontext
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple, Protocol

import numpy as np
import torch

from .. import settings
from ..capture.record import record
from ..capture.hooks import heads_masked, missing_note, projections

log = logging.getLogger("attnviz")


def check_text(text) -> str:
    """The text to run, or a ValueError that says what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, not {type(text).__name__}")
    # Lone surrogates (from a broken paste or a URL) cannot be encoded: replace them.
    text = text.encode("utf-8", "replace").decode("utf-8")
    # Only spaces or invisible characters (NUL, zero-width, bidi controls): tokenizers drop them all.
    if not any(c.isprintable() and not c.isspace() for c in text):
        raise ValueError("The text is empty: enter a sentence or two to see its attention.")
    return text  # whole: the token limits bound the work, and what they cut is counted in the trace's truncated


_COPIERS = ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="attnviz-copy")


def stacked(tensors) -> np.ndarray:
    """Batch-of-one tensors, one per layer, as one read-only float32 array (N, ...) that AttentionTrace adopts
    as it is. Numpy copies with the GIL released, so the layers are copied in parallel (faster than torch.cat).

    Given a list, each entry is let go once copied: a caller that hands over its only references never holds
    two copies of every hidden state (164 MB each for a 12-layer, 768-wide model at 4,096 tokens)."""
    out = np.empty((len(tensors), *tensors[0].shape[1:]), np.float32)  # (N, ...)

    def copy(i):
        out[i] = tensors[i][0].float().cpu().numpy()  # (1, ...) -> (...)
        if isinstance(tensors, list):
            tensors[i] = None

    list(_COPIERS.map(copy, range(len(tensors))))
    out.setflags(write=False)  # given up to the trace
    return out


class Encoded(NamedTuple):
    ids: list  # (T,) token ids, special tokens included
    tokens: tuple  # (T,) token strings
    special: np.ndarray | None  # (T,) bool; None: no special tokens
    word_ids: np.ndarray | None  # (T,) int, -1 for special tokens; None: each token a word
    truncated: int  # tokens dropped to fit max_tokens
    text: str | None = None  # what the tokens spell when it is not the text given: the chat template applied


def _word_ids(enc, text: str, special: np.ndarray) -> np.ndarray:
    """(T,) word index of each token, -1 for special tokens."""
    if not enc.is_fast:  # Python tokenizers (ByT5's bytes) know no words: each token stands alone
        words = np.arange(len(special))
    else:
        words = np.array([-1 if w is None else w for w in enc.word_ids()], dtype=np.int64)
        # SentencePiece tokenizers that do not pre-split (Llama 2, Mistral) put every token in word 0:
        # where whitespace finds more words than the tokenizer does, use whitespace-separated words.
        starts = [m.start() for m in re.finditer(r"\S+", text)]
        # (blanks before the first word belong to it: -1 is for special tokens only)
        ends = [max(end - 1, 0) for _, end in enc["offset_mapping"]]
        spaced = np.array([max(bisect_right(starts, e) - 1, 0) for e in ends], np.int64)
        if len(set(spaced[~special])) > len(set(words[~special])):
            words = spaced
    words[special] = -1
    return words


def has_chat_template(tokenizer) -> bool:
    """Whether ``tokenizer`` brings a chat template (instruct and chat models do)."""
    return bool(getattr(tokenizer, "chat_template", None))


def chat_prompt(tokenizer, text: str) -> tuple[str, int]:
    """``text`` as one user turn of the tokenizer's chat template, ready for the model's answer, and where ``text``
    starts in it (-1 where the template changed it)."""
    if not has_chat_template(tokenizer):
        raise ValueError("This model's tokenizer has no chat template: trace the text as it is.")
    try:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
    except Exception as e:  # a template that raises (it wants a system turn first, …) has its own words
        raise ValueError(f"The model's chat template refused the text: {e}") from None
    return rendered, rendered.rfind(text)


def chat_kw(chat: bool) -> dict:
    """The keyword a backend's trace, run_with_trace, generate and scorer take for the chat template: none when it is off,
    since only the backends that ``can("chat")`` know it."""
    return {"chat": True} if chat else {}


def encode(tokenizer, text: str, max_tokens: int, chat: bool = False) -> Encoded:
    """Tokenize ``text``, keeping at most ``max_tokens`` (specials included). ``chat``: as the user's turn of the
    tokenizer's chat template; the template's own tokens are marked special, so they hide with the special tokens."""
    fast = bool(getattr(tokenizer, "is_fast", False))
    start, spelled = 0, None
    if chat:  # the template writes the special tokens itself
        spelled, start = chat_prompt(tokenizer, text)
    body = text if spelled is None else spelled
    enc = tokenizer(body, add_special_tokens=not chat, return_offsets_mapping=fast, verbose=False)
    n_full = len(enc["input_ids"])
    if n_full > max_tokens:  # again, cut by the tokenizer itself (it keeps the closing special tokens)
        enc = tokenizer(body, add_special_tokens=not chat, truncation=True, max_length=max_tokens,
                        return_offsets_mapping=fast)
    ids = enc["input_ids"]
    special = np.array(
        tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True), dtype=bool
    )
    if chat and fast and start >= 0:  # every token outside the user's text is the template's
        ends = np.array([end for _, end in enc["offset_mapping"]])
        begins = np.array([begin for begin, _ in enc["offset_mapping"]])
        special |= (ends <= start) | (begins >= start + len(text))
    words = _word_ids(enc, body, special)
    tokens = tuple(tokenizer.convert_ids_to_tokens(ids))
    return Encoded(ids, tokens, special, words, max(0, n_full - len(ids)), spelled)


def wrapped(tokenizer, ids: list) -> list:
    """``ids`` between the special tokens the tokenizer puts around a text ([CLS] … [SEP], <s> …)."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    at = next((i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare), None)
    if at is None:  # a tokenizer that changes the text's own ids when it adds specials: leave the ids bare
        return list(ids)
    return [*full[:at], *ids, *full[at + len(bare):]]


def ordinary_ids(tokenizer, vocab_size: int) -> list:
    """Every id below ``vocab_size`` that is not one of the tokenizer's special tokens."""
    special = set(tokenizer.all_special_ids)
    return [i for i in range(min(len(tokenizer), vocab_size)) if i not in special]


def build_trace(key: str, enc: Encoded, text: str, kind: str, weights, hidden_states, norms: dict,
                capture: str = "interface"):
    """The one place a backend's run becomes a trace: one stack's tokens (``enc``), weights (a Weights source),
    hidden states (L+1 batch-of-one tensors) and norm statistics."""
    from ..core.trace import AttentionTrace

    L, H, T = weights.shape[:3]
    wants = {k: (L, H, T) if k == "value_norms" else (L, T) for k in norms}
    if any(v.shape != wants[k] for k, v in norms.items()):  # layers shared or called again (ALBERT): none at all
        log.warning("%s: norm statistics skipped (the hooks saw other layers than the model's %d)", key, L)
        norms = {}
    return AttentionTrace(
        tokens=enc.tokens,
        weights=weights,
        hidden_states=stacked(hidden_states),  # (L+1) × (1, T, D) -> (L+1, T, D)
        norms=norms,
        special=enc.special,
        word_ids=enc.word_ids,
        model=key,
        kind=kind,
        text=text,
        truncated=enc.truncated,
        capture=capture,
    )


class Scorer(NamedTuple):
    """One prediction as a differentiable function of the text's token embeddings (attnviz.analysis.faithfulness)."""

    target: str  # what is scored, in words: "log-odds of positive", "‖[CLS] output‖"
    probability: bool  # True: the score is the target's log-odds, so sigmoid(score) is its probability
    position: int | None  # the query position the prediction reads; None: every position alike (mean pooling)
    embeds: torch.Tensor  # (T, D) the token embeddings (positions are added inside the model)
    score: Callable  # token embeddings (B, T, D) -> (B,) float64; recorded=True: one text, attnviz.analysis.interventions' edits apply


def log_odds(logits: torch.Tensor, c: int) -> torch.Tensor:
    """log p_c / (1 − p_c) from logits (B, C): unlike p_c it does not saturate for a confident model."""
    others = torch.cat([logits[:, :c], logits[:, c + 1:]], 1).double()  # (B, C − 1)
    return logits[:, c].double() - others.logsumexp(1)


ABILITIES = {  # what a backend may do beyond tracing a text; each declares its own (Backend.abilities)
    "generate": "continue a prompt: generate(prompt, sampling) (causal language models)",
    "token_ids": "trace token ids as given: trace_ids(ids), plain_ids() (the repeated-token probe)",
    "outputs": "the trace and the model's output in one forward: run_with_trace(text) (next-token logits, label probabilities)",
    "ablation": "run with heads masked: ablation(text)",
    "positions": "the model's own position information: position_info()",
    "scorer": "the prediction as a function of the token embeddings: scorer(text) (faithfulness)",
    "predict": "label probabilities: predict(text), labels",
    "translate": "the greedy output text: translate(text)",
    "chat": "the tokenizer's chat template around a text: trace/run_with_trace/generate/scorer(…, chat=True)",
}


class Backend(Protocol):
    """A loaded model: everything pages and analyses use. ``lock`` serialises use of the shared model; what it
    can do beyond ``trace`` is declared in ``abilities`` (keys of ABILITIES), never found by probing."""

    key: str
    kind: str  # "encoder", "decoder" or "encoder-decoder"
    n_layers: int
    n_heads: int
    max_tokens: int  # the most tokens a text may have (specials included)
    description: str
    norm_note: str  # "" when every norm statistic is recorded; else what the Norms page cannot show
    lock: threading.Lock
    abilities: frozenset  # keys of ABILITIES
    capture: str  # "interface" (weights from the captured q and k) or "eager" (the model's own weights)
    tokenizer: object | None  # a Hugging Face tokenizer; None: attnviz's own word vocabulary (``vocab``)

    def can(self, ability: str) -> bool:
        """Whether the backend does ``ability`` (a key of ABILITIES)."""

    def trace(self, text: str, target: str | None = None, max_tokens: int | None = None):
        """The AttentionTrace (Seq2SeqTrace for encoder–decoders) of ``text``, cut to ``max_tokens`` (default:
        the model's positions, capped by ATTNVIZ_MAX_TOKENS)."""

    def ablation(self, text: str, max_tokens: int | None = None) -> tuple[str, Callable]:
        """(measure, run): ``run(head_mask (L, H))`` is the output that head ablation compares (a ValueError
        in plain words where ablation is not supported); ``measure`` names it (attnviz.analysis.ablation)."""

    def position_info(self):
        """The model's own position information (``attnviz.backends.positions.PositionInfo``)."""

    def scorer(self, text: str, target: str | None = None, max_tokens: int | None = None) -> Scorer:
        """The prediction to explain (a ValueError in plain words where the model has none): the predicted or
        chosen label of a classifier, next token of a causal LM, or an encoder's [CLS] output norm."""


class Recorded(NamedTuple):
    """One recorded forward of a backend's net (``TorchBackend.recorded``), and how a stack of it becomes a trace."""

    backend: "TorchBackend"
    recorder: object  # capture.record's Recorder: the queries and keys, norms, the forward handed over

    def trace(self, enc: Encoded, text: str, kind: str, hidden_states, side: str = "", weights=None,
              norms: dict | None = None):
        """One stack's trace: ``side`` ("", "encoder", "decoder") names the stack in the recorder; ``weights`` and
        ``norms`` replace what it recorded (eager attention's own weights, a model without norm hooks)."""
        rec = self.recorder
        return build_trace(self.backend.key, enc, text, kind, rec.weights(side) if weights is None else weights,
                           hidden_states, rec.norms(side) if norms is None else norms, self.backend.capture)


class TorchBackend:
    """What backends over a torch module ``net`` share: position information, norm coverage, head masking."""

    net: torch.nn.Module
    lock: threading.Lock
    position_limit: int | None  # how many positions the model has; None: any number (sinusoids, rotary)
    abilities: frozenset = frozenset({"positions"})
    capture = "interface"  # attnviz's own modules hand over q and k as Hugging Face's interface does
    tokenizer = None  # the backends with a Hugging Face tokenizer set theirs

    def can(self, ability: str) -> bool:
        if ability not in ABILITIES:
            raise ValueError(f"Unknown ability {ability!r}; known: {', '.join(ABILITIES)}")
        return ability in self.abilities

    def limit(self, cap: int | None = None) -> int:
        """The most tokens a text may have: the model's positions, capped by ``cap`` (or ATTNVIZ_MAX_TOKENS)."""
        return min(n for n in (cap or settings.max_tokens(), self.position_limit) if n)

    @property
    def max_tokens(self) -> int:
        return self.limit()

    def position_info(self):
        from .positions import position_info

        return position_info(self.net)

    @property
    def norm_note(self) -> str:
        return missing_note(self.net)

    @contextmanager
    def recorded(self):
        """The one way a backend runs a forward it traces: under its lock (a net and its tokenizer serve one run
        at a time), without autograd, with attnviz's recorder on the net (its hooks removed on exit, whatever
        happens). Yields a ``Recorded``, whose ``trace`` makes each stack's trace once the forward has run."""
        with self.lock, torch.inference_mode(), record(self.net) as rec:
            yield Recorded(self, rec)

    def masked_run(self, forward: Callable[[], torch.Tensor]) -> Callable[[np.ndarray], torch.Tensor]:
        """``run(head_mask)``: ``forward()`` with each head's output scaled by ``head_mask`` (L, H)."""
        projs = projections(self.net, self.n_layers)

        def run(head_mask):
            with self.lock, torch.inference_mode(), heads_masked(projs, head_mask):
                return forward()

        return run

    def scoring(self, ids: list, table: torch.nn.Embedding, read: Callable, **scorer) -> Scorer:
        """A Scorer over ``ids``: ``read(ids (B, T)) -> (B,)`` runs the net, whose token embeddings ``table``
        then gives out the embeddings the score is asked about."""
        ids = torch.tensor([ids], device=table.weight.device)  # (1, T)
        with torch.no_grad():
            embeds = table(ids)[0].detach().float().cpu()  # (T, D); the hook moves them to the model's device

        def score(x: torch.Tensor, recorded: bool = False) -> torch.Tensor:
            handle = table.register_forward_hook(lambda module, args, out: x.to(out))
            try:
                with self.lock, record(self.net) if recorded else nullcontext():
                    return read(ids.expand(len(x), -1)).double().cpu()  # (B,)
            finally:
                handle.remove()

        return Scorer(embeds=embeds, score=score, **scorer)
