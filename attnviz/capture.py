"""One capture mechanism for every model: what each attention call saw, and norm statistics, for one forward.

``with record(net) as rec:`` makes ``rec`` the active recorder for this thread and registers the norm hooks;
inside it, every attention call — attnviz's own ``MultiHeadAttention`` or a Hugging Face model's through
attnviz's registered attention function — hands its queries, keys and mask recipe to ``rec`` and runs its fast
path (SDPA), never materialising weights. Outside a ``record`` block nothing is kept, so a model shared by all
sessions stays stateless.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

from . import hooks
from .nn.attention import RECORDER as _ACTIVE
from .weights import LayerQK, OnDemandWeights

# Submodule names of cross-attention in the families attnviz knows (BART/Marian, T5, BERT decoders, its own).
CROSS = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn")

_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {attention module: side}


def active() -> "Recorder | None":
    """The recorder of the forward running in this thread, if any."""
    return _ACTIVE.get()


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
    """Per attention module (in call order), the LayerQK of its last call; norm statistics by side."""

    def __init__(self, net, norms: hooks.Recorder):
        self.sides = _sides(net)
        self.calls: dict = {}  # module -> LayerQK, in the order of first calls (layer order)
        self._norms = norms
        self.seen_masks: dict = {}  # id(mask) -> (mask, recipe): a model shares one mask across its layers

    def attention(self, module, layer: LayerQK) -> None:
        """Called by each attention function once per forward (a second call, in generation, replaces it)."""
        self.calls[module] = layer

    def layers(self, side: str = "") -> list[LayerQK]:
        """The calls of one side ("encoder", "decoder", "cross"); all of them for a model with one stack."""
        return [layer for m, layer in self.calls.items() if not side or self.sides.get(m) == side]

    def weights(self, side: str = "") -> OnDemandWeights:
        """The side's weights, computed on demand; a ValueError when the model made no attention call."""
        layers = self.layers(side)
        if not layers:
            raise ValueError(f"no attention calls were recorded{' for the ' + side if side else ''}")
        return OnDemandWeights(layers)

    def norms(self, side: str = "") -> dict:
        return self._norms.norms(side)


@contextmanager
def record(net):
    """Record the forward passes run inside the block; hooks are removed and the recorder is cleared on
    exit, whatever happens."""
    with hooks.record(net) as norms:
        rec = Recorder(net, norms)
        token = _ACTIVE.set(rec)
        try:
            yield rec
        finally:
            _ACTIVE.reset(token)
