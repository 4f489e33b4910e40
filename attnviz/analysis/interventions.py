"""From looking to testing: edit what heads attend to inside the forward, and see what the model does then.

Editing the weights a forward returns changes nothing downstream; the edit has to happen where attention is
computed. attnviz already owns that point for every model it captures (its own modules' ``attend`` and its
function in transformers' ``AttentionInterface``): inside ``editing(edits)`` each recorded attention call folds
the edits of its layer into its LayerQK recipe (``EditedQK``), and the layer's output is the edited weights
times the values — one mechanism for the output, the trace and every view of it.

Edits: ``Knockout`` (a query no longer sees a key; the row renormalised, as a mask would do), ``Pattern`` (a
head's weights replaced), ``ZeroValue`` (a token's value contributes nothing to the other positions' outputs,
Mohebbi et al. 2023), ``Patch`` (a head's output replaced, what ``patch_heads`` uses). ``run`` and ``patch_heads``
drive a backend, so this module sits beside ``capture`` above the backends, not in ``analysis`` (which never
imports one).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Callable, Union

import numpy as np
import torch

from ..backends import load
from ..backends.common import chat_kw
from ..core.budget import check_forwards
from ..capture.record import EDITOR
from ..core.weights import LayerQK

PATTERNS = ("uniform", "previous", "first")
MOHEBBI = "Mohebbi et al. 2023, *Quantifying Context Mixing in Transformers*"
TOP_K = 5


@dataclass(frozen=True)
class Knockout:
    """Query ``query`` no longer sees key ``key`` in head ``head`` of ``layer`` (None: every query, key, head);
    each row is renormalised over the keys it still sees."""

    layer: int
    head: int | None = None
    query: int | None = None
    key: int | None = None


@dataclass(frozen=True, eq=False)
class Pattern:
    """Head ``head`` of ``layer`` attends with ``weights``: a (Tq, Tk) array used as given, or a named pattern
    over the keys each query may see ("uniform", "previous": the key before the query, "first"); values unchanged."""

    layer: int
    head: int | None
    weights: Union[str, np.ndarray]


@dataclass(frozen=True)
class ZeroValue:
    """Token ``key``'s value vector is zeroed for every query but its own ("value zeroing", Mohebbi et al. 2023):
    weights are not renormalised, so the other positions' outputs lose exactly its contribution."""

    key: int
    layer: int | None = None
    head: int | None = None


@dataclass(frozen=True, eq=False)
class Patch:
    """Head ``head`` of ``layer`` outputs ``output`` (Tq, Dv) instead of its own (activation patching)."""

    layer: int
    head: int
    output: np.ndarray


Edit = Union[Knockout, Pattern, ZeroValue, Patch]


def describe(edit: Edit) -> str:
    """One line a person reads: what the edit does."""
    where = lambda e: f"L{e.layer}" + ("" if e.head is None else f" H{e.head}")  # noqa: E731
    if isinstance(edit, Knockout):
        q = "every query" if edit.query is None else f"query {edit.query}"
        k = "every key" if edit.key is None else f"key {edit.key}"
        return f"{where(edit)}: {q} no longer sees {k}"
    if isinstance(edit, Pattern):
        name = edit.weights if isinstance(edit.weights, str) else "a given pattern"
        return f"{where(edit)}: attends with {name}"
    if isinstance(edit, ZeroValue):
        layer = "every layer" if edit.layer is None else f"L{edit.layer}"
        head = "" if edit.head is None else f" H{edit.head}"
        return f"{layer}{head}: token {edit.key}'s value zeroed for the other positions"
    return f"{where(edit)}: output patched"


def _check_index(what: str, value, count: int, edit) -> None:
    if value is not None and not (isinstance(value, (int, np.integer)) and 0 <= value < count):
        raise ValueError(f"{describe(edit)}: {what} {value} is out of range (0 to {count - 1}).")


def apply_edits(w: torch.Tensor, edits, heads, start: int, Tq: int, seen: Callable) -> None:
    """One layer's ``edits`` of the weights ``w`` (h, rows, Tk) of heads ``heads`` and query rows from ``start``
    (of Tq), in place; ``seen(h)`` is head h's (rows, Tk) bool, the keys each row may see. The one place edits
    change weights: attnviz's own forward (``EditedQK``) and the hooks it exports (``to_transformer_lens``,
    ``to_nnsight``) both run it."""
    rows, Tk = w.shape[1:]
    stop = start + rows
    heads = [int(h) for h in heads]
    p = torch.arange(start, stop) + (Tk - Tq)  # (rows,) each query's position among the keys
    for e in edits:
        if isinstance(e, Patch):
            continue
        for h in heads if e.head is None else [e.head]:
            if h not in heads:
                continue
            i = heads.index(h)
            if isinstance(e, Knockout):
                _knock_out(w[i], e, start, stop)
            elif isinstance(e, ZeroValue):
                w[i, :, e.key] *= (p == e.key).to(w.dtype)  # its own row keeps it
            else:
                w[i] = _pattern(e.weights, seen(h), start, stop, p).to(w)


def _knock_out(w: torch.Tensor, e: Knockout, start: int, stop: int) -> None:
    """Zero the knocked-out entries of one head's rows (rows, Tk) in place, then renormalise them."""
    rows = slice(None) if e.query is None else slice(e.query - start, e.query - start + 1)
    if e.query is not None and not start <= e.query < stop:
        return
    keys = slice(None) if e.key is None else slice(e.key, e.key + 1)
    lost = w[rows, keys].sum(-1, keepdim=True) > 0  # (rows, 1): a row that loses nothing stays as it is
    w[rows, keys] = 0.0
    total = w[rows].sum(-1, keepdim=True)  # (rows, 1)
    w[rows] = torch.where(lost, w[rows] / total.clamp_min(torch.finfo(w.dtype).tiny), w[rows])


def _pattern(weights, seen: torch.Tensor, start: int, stop: int, p: torch.Tensor) -> torch.Tensor:
    """(rows, Tk): a head's replacement weights for query rows ``start:stop``, given the keys each may see."""
    Tk = seen.shape[-1]
    if not isinstance(weights, str):
        return torch.as_tensor(np.asarray(weights)[start:stop], dtype=torch.float32)
    j = torch.arange(Tk)[None, :]  # (1, Tk)
    if weights == "uniform":
        chosen = seen
    else:
        if weights == "previous":  # the last key it sees before itself; itself when none
            before = seen & (j < p[:, None])
            score = torch.where(before, j, -1).amax(-1)  # (rows,)
            at = torch.where(score >= 0, score, p.clamp(max=Tk - 1))
        else:  # "first": the first key it sees
            at = torch.where(seen, j, Tk).amin(-1).clamp(max=Tk - 1)
        chosen = (j == at[:, None]) & seen.any(-1, keepdim=True)
    chosen = chosen.float()
    return chosen / chosen.sum(-1, keepdim=True).clamp_min(1.0)


@dataclass(frozen=True, eq=False)
class EditedQK(LayerQK):
    """A LayerQK whose weights (every tile, column and output made from them) carry ``edits`` of its layer."""

    edits: tuple = ()

    @classmethod
    def of(cls, layer: LayerQK, edits: tuple) -> "EditedQK":
        base = {f.name: getattr(layer, f.name) for f in fields(LayerQK)}
        made = cls(**base, edits=edits)
        made.check()
        return made

    def check(self) -> None:
        """A ValueError in plain words for an edit that does not fit this layer."""
        H, Tq, Tk = self.shape
        for e in self.edits:
            _check_index("head", e.head, H, e)
            if isinstance(e, Knockout):
                _check_index("query", e.query, Tq, e)
                _check_index("key", e.key, Tk, e)
            elif isinstance(e, ZeroValue):
                _check_index("token", e.key, Tk, e)
            elif isinstance(e, Pattern):
                if isinstance(e.weights, str):
                    if e.weights not in PATTERNS:
                        raise ValueError(f"Unknown pattern {e.weights!r}: one of {', '.join(PATTERNS)}.")
                else:
                    w = np.asarray(e.weights)
                    if w.shape != (Tq, Tk) or not np.isfinite(w).all():
                        raise ValueError(f"{describe(e)}: the weights must be a finite ({Tq}, {Tk}) array, "
                                         f"not {w.shape}.")
            elif isinstance(e, Patch) and tuple(np.shape(e.output))[:1] != (Tq,):
                raise ValueError(f"{describe(e)}: the output has {np.shape(e.output)[0]} positions, the layer {Tq}.")

    def edit(self, w: torch.Tensor, heads, start: int, stop: int) -> None:
        """This layer's edits of the weights ``w`` (h, rows, Tk) of query rows ``start:stop``, in place."""
        Tk = self.shape[2]
        apply_edits(w, self.edits, heads, start, self.shape[1],
                    lambda h: torch.isfinite(self.scores([h], start, stop, 0, Tk)[0]))

    def column(self, heads, key: int, norm: torch.Tensor) -> torch.Tensor:
        return self.weights(heads, 0, self.shape[1])[:, :, key]  # (h, Tq): the edited rows, not the normaliser's

    def output(self, v: torch.Tensor, rows: int | None = None, visit=None, tile=None,
               chunk: int | None = None) -> torch.Tensor:
        out = super().output(v, rows, visit, tile, chunk)  # (H, Tq, Dv)
        for e in self.edits:
            if isinstance(e, Patch):
                out[e.head] = torch.as_tensor(np.asarray(e.output), dtype=out.dtype)
        return out


class Editor:
    """What attention functions consult inside ``editing``: the layer index of each call (in call order: one
    stack per model), its edits, and each layer's output when ``keep`` asks for them (for patching).

    Every layer attends explicitly, edited or not (weights @ values, not SDPA): a run and its edited twin then
    differ by the edit alone, not by two kernels' rounding."""

    def __init__(self, edits, keep: bool = False):
        self.edits = tuple(edits)
        self.modules: dict = {}  # attention module -> its layer, in the order of first calls
        self.outputs: dict | None = {} if keep else None  # layer -> (H, Tq, Dv)

    def layers(self, module, layers: list[LayerQK]) -> list[LayerQK]:
        """The call's recipes with this layer's edits folded in (as they are where nothing edits it)."""
        if len(layers) != 1:
            raise ValueError("Edits apply to one text at a time, not to a padded batch.")
        index = self.modules.setdefault(module, len(self.modules))
        return [EditedQK.of(layers[0], tuple(e for e in self.edits if e.layer is None or e.layer == index))]

    def output(self, module, layers: list[LayerQK], values: torch.Tensor) -> torch.Tensor:
        """The layer's output (H, Tq, Dv) from its edited weights."""
        out = layers[0].output(values[0])  # (H, Tq, Dv)
        if self.outputs is not None:
            self.outputs[self.modules[module]] = out.float().cpu().numpy()
        return out


@contextmanager
def editing(edits, keep: bool = False):
    """Recorded forwards inside the block attend with ``edits``; yields the Editor (its ``outputs`` with ``keep``)."""
    editor = Editor(edits, keep)
    token = EDITOR.set(editor)
    try:
        yield editor
    finally:
        EDITOR.reset(token)


def spell(edits) -> str:
    """Edits as a link's text: "ko:1.0", "ko:1.1:q5:k3", "pat:0.1:previous", "zv:3" or "zv:3:1.0" (token 3, layer 1,
    head 0), comma-separated; ``parse`` reads it back. Given weight arrays and patches have no spelling."""
    parts = []
    for e in edits:
        if isinstance(e, Knockout):
            parts.append(":".join([f"ko:{e.layer}.{'' if e.head is None else e.head}".rstrip("."),
                                   *([] if e.query is None else [f"q{e.query}"]),
                                   *([] if e.key is None else [f"k{e.key}"])]))
        elif isinstance(e, Pattern) and isinstance(e.weights, str):
            parts.append(f"pat:{e.layer}.{'' if e.head is None else e.head}".rstrip(".") + f":{e.weights}")
        elif isinstance(e, ZeroValue):
            where = "" if e.layer is None else f":{e.layer}" + ("" if e.head is None else f".{e.head}")
            parts.append(f"zv:{e.key}{where}")
    return ",".join(parts)


def _where(text: str) -> tuple[int, int | None]:
    layer, _, head = text.partition(".")
    return int(layer), (int(head) if head else None)


def parse(text: str, n_layers: int, n_heads: int, n_tokens: int) -> tuple[list, list[tuple[str, str]]]:
    """(edits, problems) from ``spell``'s text: each part that is not an edit of this model and text is left out,
    as (the part, why) — the part is the caller's to quote."""
    edits, problems = [], []
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        kind, _, rest = part.partition(":")
        fields_ = rest.split(":") if rest else []
        try:
            if kind == "ko" and fields_:
                extra = {"q": None, "k": None}
                for f in fields_[1:]:
                    if f[:1] not in extra or not f[1:].isdigit():
                        raise ValueError("knock-outs take q<query> and k<key>")
                    extra[f[0]] = int(f[1:])
                edit = Knockout(*_where(fields_[0]), query=extra["q"], key=extra["k"])
            elif kind == "pat" and len(fields_) == 2:
                edit = Pattern(*_where(fields_[0]), fields_[1])
            elif kind == "zv" and len(fields_) in (1, 2):
                edit = ZeroValue(int(fields_[0]), *(_where(fields_[1]) if len(fields_) == 2 else (None, None)))
            else:
                raise ValueError("not one of ko:L.H[:qN][:kN], pat:L.H:pattern, zv:token[:L.H]")
        except ValueError as e:
            problems.append((part, "its numbers are not whole numbers" if "int()" in str(e) else str(e)))
            continue
        try:
            check_edits([edit], n_layers, n_heads)
            EditedQK.of(LayerQK(torch.zeros(n_heads, n_tokens, 1), torch.zeros(1, n_tokens, 1), 1.0), (edit,))
        except ValueError as e:
            problems.append((part, str(e)))
            continue
        edits.append(edit)
    return edits, problems


@dataclass(frozen=True)
class Outcome:
    """One run: its trace and what the model output. Causal LMs: ``logprobs`` (T−1,) of each actual next token
    (entry i: token i + 1) and the top-k next tokens at every position; classifiers: ``probs`` per label."""

    trace: object
    logprobs: np.ndarray | None = None  # (T−1,)
    top_ids: np.ndarray | None = None  # (T, k)
    top_tokens: tuple | None = None  # (T, k) strings
    top_probs: np.ndarray | None = None  # (T, k)
    probs: np.ndarray | None = None  # (C,)
    labels: tuple | None = None  # (C,)


@dataclass(frozen=True)
class Effect:
    """The same text run as it is (``base``) and with ``edits`` (``edited``)."""

    base: Outcome
    edited: Outcome
    edits: tuple
    kind: str  # "lm", "classifier" or "encoder"

    @property
    def change(self) -> np.ndarray:
        """(L, T): the norm of each layer's output change per token, edited − base."""
        a, b = self.base.trace.hidden_states[1:], self.edited.trace.hidden_states[1:]  # (L, T, D)
        return np.linalg.norm(b.astype(np.float64) - a, axis=-1)


def _backend(model):
    return load(model) if isinstance(model, str) else model


def kind_of(backend) -> str:
    """"lm", "classifier" or "encoder": what ``run`` reads from the model; a ValueError for what it cannot edit."""
    if backend.kind == "encoder-decoder":
        raise ValueError("Interventions cover encoders, classifiers and causal LMs; encoder–decoder models are "
                         "not supported.")
    if backend.capture == "eager":
        raise ValueError(f"{backend.key} runs eager attention (attnviz could not capture it exactly), so attnviz "
                         "cannot edit its attention.")
    if backend.kind == "decoder":
        return "lm"
    return "classifier" if backend.can("predict") else "encoder"


def check_edits(edits, n_layers: int, n_heads: int) -> tuple:
    """The edits as a tuple, or a ValueError naming the first that does not fit the model."""
    edits = tuple(edits)
    for e in edits:
        if not isinstance(e, (Knockout, Pattern, ZeroValue, Patch)):
            raise ValueError(f"{e!r} is not an edit (Knockout, Pattern, ZeroValue, Patch).")
        _check_index("layer", e.layer, n_layers, e)
        _check_index("head", e.head, n_heads, e)
    return edits


def forward(backend, text, edits=(), keep: bool = False, chat: bool = False):
    """(trace, output, editor) of one edited forward (``chat``: a causal LM's text in its chat template): the
    output is next-token logits (T, V), label probabilities (C,), or None (an encoder without a head)."""
    kind = kind_of(backend)
    with editing(edits, keep) as editor:
        if kind == "encoder":
            trace = backend.trace(text) if isinstance(text, str) else backend.trace_ids(list(text))
            output = None
        else:
            trace, output = backend.run_with_trace(text, **chat_kw(chat))
    wanted = max((e.layer for e in edits if e.layer is not None), default=-1)
    if edits and len(editor.modules) <= wanted:
        raise ValueError(f"The edits reached {len(editor.modules)} attention layers of {backend.key}, not layer "
                         f"{wanted}: its attention does not run through attnviz.")
    return trace, output, editor


def outcome(backend, kind: str, trace, output, k: int = TOP_K) -> Outcome:
    """An Outcome from one forward's trace and output."""
    if kind == "encoder":
        return Outcome(trace)
    if kind == "classifier":
        return Outcome(trace, probs=output.double().numpy(), labels=tuple(backend.labels))
    logp = torch.log_softmax(output.double(), -1)  # (T, V)
    ids = torch.as_tensor(_ids(backend, trace))
    top = logp.exp().topk(min(k, logp.shape[-1]), -1)
    names = tuple(tuple(token_name(backend, i) for i in row) for row in top.indices.tolist())
    return Outcome(trace, logp[:-1].gather(-1, ids[1:, None])[:, 0].numpy(), top.indices.numpy(), names,
                   top.values.numpy())


def run(model, text, edits=(), k: int = TOP_K, chat: bool = False) -> Effect:
    """``text`` (or token ids, wrapped as ``trace_ids`` wraps them; ``chat``: a text in the model's chat template) run
    as it is and with ``edits``: an Effect."""
    backend = _backend(model)
    kind = kind_of(backend)
    edits = check_edits(edits, backend.n_layers, backend.n_heads)
    base = outcome(backend, kind, *forward(backend, text, chat=chat)[:2], k=k)
    edited = outcome(backend, kind, *forward(backend, text, edits, chat=chat)[:2], k=k) if edits else base
    return Effect(base, edited, edits, kind)


def _ids(backend, trace) -> list[int]:
    """The token ids of a trace's tokens."""
    if backend.tokenizer is None:
        return [backend.vocab.stoi[t] for t in trace.tokens]
    return backend.tokenizer.convert_tokens_to_ids(list(trace.tokens))


def token_name(backend, i: int) -> str:
    if backend.tokenizer is None:
        return backend.vocab.itos[i]
    return backend.tokenizer.convert_ids_to_tokens(int(i))


def token_id(backend, token) -> int:
    """The id of ``token``: an id, a token as the trace shows it, or a word that is one token (" word" too)."""
    if isinstance(token, (int, np.integer)):
        return int(token)
    if backend.tokenizer is None:
        if token in backend.vocab.stoi:
            return backend.vocab.stoi[token]
    else:
        tok = backend.tokenizer
        if token in tok.get_vocab():
            return tok.convert_tokens_to_ids(token)
        for spelling in (" " + token, token):
            ids = tok(spelling, add_special_tokens=False)["input_ids"]
            if len(ids) == 1:
                return ids[0]
    raise ValueError(f"{token!r} is not one token of this model's vocabulary.")


@dataclass(frozen=True)
class LogitDiff:
    """logit(``good``) − logit(``bad``) at ``position`` (the prediction of the token after it; −1: the last)."""

    good: object
    bad: object
    position: int = -1
    # A gap between the prompts under this is too small to divide by: half a logit moves the odds of good against
    # bad by 1.6×, while one head's noise moves a logit difference by hundredths.
    small = 0.5

    def __call__(self, backend, output: torch.Tensor) -> float:
        row = output[self.position].double()
        return float(row[token_id(backend, self.good)] - row[token_id(backend, self.bad)])


@dataclass(frozen=True)
class LabelProb:
    """The probability of label ``label`` (its name or index)."""

    label: object
    small = 0.05  # a gap under five points of probability is too small to divide by

    def __call__(self, backend, output: torch.Tensor) -> float:
        labels = list(backend.labels)
        i = labels.index(self.label) if self.label in labels else self.label
        if not isinstance(i, (int, np.integer)) or not 0 <= i < len(labels):
            raise ValueError(f"{self.label!r} is not a label of this classifier: {', '.join(labels)}.")
        return float(output[i])


@dataclass(frozen=True)
class Patching:
    """Head patching's result: ``restored`` (L, H) = (patched − corrupted) / (clean − corrupted)."""

    restored: np.ndarray  # (L, H)
    clean: float
    corrupted: float
    patched: np.ndarray  # (L, H) the metric of each patched run
    tokens: tuple  # the corrupted prompt's tokens
    small: float = 0.0  # the metric's smallest gap between the prompts worth dividing by

    @property
    def barely(self) -> bool:
        """Whether the prompts barely differ on the metric: ``restored`` divides by a gap near zero (clean 0.003,
        corrupted −0.008), so its shares are mostly noise however strong their colours."""
        return abs(self.clean - self.corrupted) < self.small

    def moved(self) -> np.ndarray:
        """(L, H) how far patching each head moves the metric, in its own units (patched − corrupted)."""
        return self.patched - self.corrupted


def patch_heads(model, clean, corrupted, metric: Callable, progress: Callable[[int, int], None] | None = None,
                chat: bool = False) -> Patching:
    """The corrupted prompt run with one head's output taken from the clean run, for every head: how much of
    ``metric`` (``LogitDiff``, ``LabelProb``) each head restores. The prompts must have the same token count
    (``chat``: both in the model's chat template, the template's tokens counted)."""
    backend = _backend(model)
    kind = kind_of(backend)
    if kind == "encoder":
        raise ValueError("Head patching needs a model with an output to measure: a causal LM or a classifier.")
    L, H = backend.n_layers, backend.n_heads
    check_forwards(L * H + 2, "Head patching")  # every head, and the clean and corrupted runs
    trace_c, out_c, editor = forward(backend, clean, keep=True, chat=chat)
    trace_x, out_x, _ = forward(backend, corrupted, chat=chat)
    if trace_c.n_tokens != trace_x.n_tokens:
        raise ValueError(f"The clean prompt has {trace_c.n_tokens} tokens and the corrupted one {trace_x.n_tokens}: "
                         "head patching needs prompts of the same token count (change one word for one word "
                         "of one token).")
    m_clean, m_corrupt = metric(backend, out_c), metric(backend, out_x)
    if abs(m_clean - m_corrupt) < 1e-9:
        raise ValueError(f"The metric is {m_clean:.4g} on both prompts: there is nothing for a head to restore.")
    patched = np.zeros((L, H))
    for n, (layer, head) in enumerate(np.ndindex(L, H)):
        edit = Patch(layer, head, editor.outputs[layer][head])
        patched[layer, head] = metric(backend, forward(backend, corrupted, (edit,), chat=chat)[1])
        if progress is not None:
            progress(n + 1, L * H)
    restored = (patched - m_corrupt) / (m_clean - m_corrupt)
    return Patching(restored, m_clean, m_corrupt, patched, trace_x.tokens, getattr(metric, "small", 0.0))


def edited_pattern(pattern: torch.Tensor, edits, layer: int) -> torch.Tensor:
    """Layer ``layer``'s attention weights (B, H, Tq, Tk) (rows sum to 1, hidden keys 0) with its Knockout, Pattern
    and ZeroValue ``edits`` applied, as attnviz's forward applies them; a key with weight exactly 0 counts as hidden
    (what ``Pattern``'s named patterns choose among). What the exported hooks and code return."""
    mine = tuple(e for e in edits if not isinstance(e, Patch) and (e.layer is None or e.layer == layer))
    if not mine:
        return pattern
    out = pattern.detach().float().clone()  # (B, H, Tq, Tk)
    B, H, Tq, Tk = out.shape
    for b in range(B):
        seen = out[b] > 0  # (H, Tq, Tk) before any edit, as the mask left it
        apply_edits(out[b], mine, range(H), 0, Tq, lambda h: seen[h])
    return out.to(pattern.dtype)


def _exportable(edits, code: bool) -> tuple:
    edits = tuple(edits)
    for e in edits:
        if not isinstance(e, (Knockout, Pattern, ZeroValue, Patch)):
            raise ValueError(f"{e!r} is not an edit (Knockout, Pattern, ZeroValue, Patch).")
        if code and (isinstance(e, Patch) or (isinstance(e, Pattern) and not isinstance(e.weights, str))):
            raise ValueError(f"{describe(e)}: a given array has no spelling in code; export it with "
                             "to_transformer_lens, or use a named pattern.")
    return edits


def to_transformer_lens(edits) -> list:
    """``fwd_hooks`` for TransformerLens' ``run_with_hooks`` that apply ``edits`` as attnviz does: Knockout, Pattern
    and ZeroValue at each layer's ``hook_pattern`` (``edited_pattern``), Patch at ``hook_z``. Layers are those of
    the model the edits were made on; TransformerLens itself is not imported."""
    edits = _exportable(edits, code=False)
    weights = [e for e in edits if not isinstance(e, Patch)]
    if any(e.layer is None for e in weights):  # one hook on every layer's pattern, which picks the layer's edits
        hooks = [(_every_pattern, lambda p, hook: edited_pattern(p, edits, int(hook.name.split(".")[1])))]
    else:
        hooks = [(f"blocks.{layer}.attn.hook_pattern", lambda p, hook, layer=layer: edited_pattern(p, edits, layer))
                 for layer in sorted({e.layer for e in weights})]
    for e in edits:
        if isinstance(e, Patch):
            def patch(z, hook, e=e):  # (B, Tq, H, Dh)
                z = z.clone()
                z[:, :, e.head] = torch.as_tensor(np.asarray(e.output), dtype=z.dtype, device=z.device)
                return z
            hooks.append((f"blocks.{e.layer}.attn.hook_z", patch))
    return hooks


def _every_pattern(name: str) -> bool:
    return name.startswith("blocks.") and name.endswith(".attn.hook_pattern")


NNSIGHT_ATTENTION = "model.model.layers[{layer}].self_attn.source.attention_interface_1"


def to_nnsight(edits, attention: str = NNSIGHT_ATTENTION, n_layers: int | None = None) -> str:
    """Python code for an nnsight trace that applies ``edits`` as attnviz does: each edited layer's softmax in
    transformers' eager attention (``attention``, a template over ``{layer}``: the attention-interface call of
    the layer's attention module; the default fits Llama-style models) is replaced by ``edited_pattern``'s. Load
    the model with ``attn_implementation="eager"``; ``n_layers`` is needed for edits of every layer."""
    edits = _exportable(edits, code=True)
    layers = sorted({e.layer for e in edits if e.layer is not None})
    if any(e.layer is None for e in edits):
        if n_layers is None:
            raise ValueError("An edit of every layer needs n_layers to spell out which layers to edit.")
        layers = list(range(n_layers))
    names = sorted({type(e).__name__ for e in edits})
    call = attention.format(layer="{layer}")
    return "\n".join([
        f"from attnviz.analysis.interventions import {', '.join(names)}, edited_pattern",
        "",
        f"edits = [{', '.join(repr(e) for e in edits)}]",
        "with model.trace(input_ids):  # model: nnsight's LanguageModel or NNsight, attn_implementation=\"eager\"",
        f"    for layer in {layers}:",
        f"        softmax = {call.replace('{layer}', 'layer')}.source.nn_functional_softmax_0",
        "        softmax.output = edited_pattern(softmax.output, edits, layer)",
        "    logits = model.output.logits.save()",
    ])


def transformer_lens_code(edits) -> str:
    """Python code that runs a TransformerLens model with ``edits`` (``to_transformer_lens``), for a person to copy."""
    edits = _exportable(edits, code=True)
    names = sorted({type(e).__name__ for e in edits})
    return "\n".join([
        f"from attnviz.analysis.interventions import {', '.join(names)}, to_transformer_lens",
        "",
        f"edits = [{', '.join(repr(e) for e in edits)}]",
        "logits = model.run_with_hooks(tokens, fwd_hooks=to_transformer_lens(edits))",
    ])


__all__ = ["Knockout", "Pattern", "ZeroValue", "Patch", "Effect", "Outcome", "run", "patch_heads", "editing",
           "LogitDiff", "LabelProb", "Patching", "describe", "spell", "parse", "MOHEBBI", "apply_edits",
           "edited_pattern", "to_transformer_lens", "to_nnsight", "transformer_lens_code"]
