"""attnviz: see what every layer and head of a transformer attends to.

Shape legend, used in comments throughout:
    L  layers            H  heads            T  positions (Tq / Tk for queries / keys, Ts / Tt source / target)
    D  model width       Dh head width       F  feed-forward width       B  batch
"""

from .backends import DEFAULT_MODEL, list_models, load
from .core.outputs import from_attentions
from .core.trace import AttentionTrace, Seq2SeqTrace
from .ui.notebook import explorer, head_view, model_view, register as _register_display, show

_register_display()  # in a notebook kernel, a trace displays itself as the explorer

__version__ = "0.2.0"


def trace(text: str, model: str = DEFAULT_MODEL, target: str | None = None):
    """Run ``model`` on ``text`` and return its AttentionTrace (Seq2SeqTrace for encoder–decoders).

    ``target`` is the decoder's text for encoder–decoder models; without it the model's own
    greedy output is used.
    """
    return load(model).trace(text, target)


__all__ = ["trace", "list_models", "load", "AttentionTrace", "Seq2SeqTrace", "DEFAULT_MODEL", "show", "explorer",
           "head_view", "model_view", "from_attentions"]
