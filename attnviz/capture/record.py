"""One capture mechanism for every model: what each attention call saw, and norm statistics, for one forward.

``with record(net) as rec:`` makes ``rec`` the active recorder for this thread and registers the norm hooks;
inside it, every attention call — attnviz's own ``MultiHeadAttention`` or a Hugging Face model's through
attnviz's registered attention function — hands its queries, keys and mask recipe to ``rec`` and runs its fast
path (SDPA), never materialising weights. Outside a ``record`` block nothing is kept, so a model shared by all
sessions stays stateless.

``with reducing(reducer):`` around a recorded forward of one text also hands every self-attention weight tile to
``reducer`` (``attnviz.analysis.long.Reducer``) as the forward attends: the attention output is then computed
from those same tiles (explicit attention instead of SDPA), so a survey of every head costs no second pass. A
layer the reducer holds already (read before a Stop in a forward of the same text) attends on its fast path.

``record(net, lengths=[n_0, n_1, …])`` records a right-padded batch of self-attention instead: each call keeps,
per text, its own queries and keys cut to its n_b tokens (what a forward of that text alone would see), and
``rec.weights(item=b)`` gives text b's weights. Norm statistics are recorded for one text only.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

from . import hooks
from ..core.weights import LayerQK, OnDemandWeights

# Submodule names of cross-attention in the families attnviz knows (BART/Marian, T5, BERT decoders, its own).
CROSS = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn")

_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {attention module: side}
_REDUCER: ContextVar = ContextVar("attnviz_reducer", default=None)
# The recorder of the forward running in this thread, None outside ``record``.
RECORDER: ContextVar = ContextVar("attnviz_recorder", default=None)
# The edits of the forward running in this thread (``attnviz.analysis.interventions``), None outside one: inside a
# recorded forward each attention call folds them into its LayerQK recipe and attends with the edited weights.
EDITOR: ContextVar = ContextVar("attnviz_editor", default=None)


def active() -> "Recorder | None":
    """The recorder of the forward running in this thread, if any."""
    return RECORDER.get()


def hand_over(module, layers: list[LayerQK], values):
    """What every recorded attention call does, attnviz's own modules and Hugging Face's alike: fold this thread's
    edits into each text's LayerQK, hand them to the recorder, and return the output (H, Tq, Dv) that the recorder
    (a reducer) or an edit computed — None when the caller should run its own fast path."""
    editor = EDITOR.get()
    if editor is not None:
        layers = editor.layers(module, layers)
    out = active().attention(module, layers, values)
    if out is None and editor is not None:
        out = editor.output(module, layers, values)  # from the edited weights; None where nothing edits this layer
    return out


def side_of(name: str) -> str:
    """"encoder", "decoder" or "cross" for an attention module's dotted name; "self" where it names none."""
    parts = name.split(".")
    if any(p in CROSS for p in parts):
        return "cross"
    if "decoder" in parts:
        return "decoder"
    return "encoder" if "encoder" in parts else "self"


def _sides(net) -> dict:
    if net not in _NAMES:
        _NAMES[net] = {m: side_of(name) for name, m in net.named_modules()}
    return _NAMES[net]


class Recorder:
    """Per attention module (in call order), the LayerQK of its last call (one per text of a batch); norm
    statistics by side."""

    def __init__(self, net, norms: hooks.NormRecorder | None, lengths: list[int] | None = None):
        self.sides = _sides(net)
        self.calls: dict = {}  # module -> [LayerQK per text], in the order of first calls (layer order)
        self._norms = norms
        self.lengths = lengths  # a right-padded batch's real lengths; None: one text
        self.seen_masks: dict = {}  # (id(mask), item) -> (mask, recipe): a model shares one mask across its layers
        self.reducer = _REDUCER.get() if lengths is None else None

    def items(self, B: int, Tq: int, Tk: int) -> list[int | None]:
        """Where each text of a call over B texts ends: [None] (all of it) for one text, else the batch's lengths."""
        if self.lengths is None:
            if B != 1:
                raise ValueError("a recorded forward takes one text at a time unless record(net, lengths) is given")
            return [None]
        if B != len(self.lengths) or Tq != Tk:
            raise ValueError(f"a recorded batch of {len(self.lengths)} texts got an attention call over {B} texts "
                             f"with {Tq} queries and {Tk} keys (batches record self-attention only)")
        return list(self.lengths)

    def attention(self, module, layers: list[LayerQK], values=None):
        """Called by each attention function once per forward with each text's LayerQK (a second call, in
        generation, replaces it) and the call's values (B, Hkv, Tk, Dv). Returns the attention output (H, Tq, Dv)
        when a reducer takes this call's weights (self-attention of one text), else None: the caller runs its own
        fast path."""
        self.calls[module] = layers
        if self.reducer is None or values is None or not self._surveyed(module):  # no reducer in a padded batch
            return None
        H, Tq, Tk = layers[0].shape
        if Tq != Tk:  # generation's later steps: one query over the cache
            return None
        feed = self.reducer.layer(H, Tk)  # None: a layer the reducer kept from a stopped forward
        return None if feed is None else layers[0].output(values[0], *feed)

    def _surveyed(self, module) -> bool:
        """Whether a reducer reads this module: an encoder–decoder's encoder, else any attention but cross."""
        side = self.sides.get(module)
        return side == "encoder" or (side != "cross" and "encoder" not in self.sides.values())

    def layers(self, side: str = "", item: int = 0) -> list[LayerQK]:
        """Text ``item``'s calls of one side ("encoder", "decoder", "cross"); all of them for a model with one stack."""
        return [layers[item] for m, layers in self.calls.items() if not side or self.sides.get(m) == side]

    def weights(self, side: str = "", item: int = 0) -> OnDemandWeights:
        """The side's weights for text ``item``, computed on demand; a ValueError when the model made no attention call."""
        layers = self.layers(side, item)
        if not layers:
            raise ValueError(f"no attention calls were recorded{' for the ' + side if side else ''}")
        return OnDemandWeights(layers)

    def norms(self, side: str = "") -> dict:
        if self._norms is None:
            raise ValueError("a recorded batch has no norm statistics: record one text at a time for them")
        return self._norms.norms(side)


@contextmanager
def reducing(reducer):
    """Recorded forwards of one text inside the block hand their self-attention weights to ``reducer``, tile by
    tile, and attend with those tiles (see the module's docstring)."""
    token = _REDUCER.set(reducer)
    try:
        yield reducer
    finally:
        _REDUCER.reset(token)


@contextmanager
def record(net, lengths: list[int] | None = None):
    """Record the forward passes run inside the block (a right-padded batch with ``lengths``, without norm
    statistics); hooks are removed and the recorder is cleared on exit, whatever happens."""
    with hooks.norm_hooks(net) if lengths is None else nullcontext() as norms:
        rec = Recorder(net, norms, lengths)
        token = RECORDER.set(rec)
        try:
            yield rec
        finally:
            RECORDER.reset(token)
