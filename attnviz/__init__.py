"""attnviz: see what every layer and head of a transformer attends to.

The folders run one way, lowest first; a module imports its own folder and those below it, never one above
(tests/unit/test_layers.py walks every import, function-level ones included):
    settings, data   operator settings (every ATTNVIZ_* read), sample texts and the demo corpus
    core             the record, no model and no UI: LayerQK and Weights, the trace, tokens, budgets
    capture          how one forward hands over what it saw: the one recorder (attnviz's modules and
                     transformers' attention function call the same hand-over), norm hooks, head masks
    nn               the built-in transformer from the seed, corrected
    backends         model keys -> loaded models behind one interface with declared abilities
    analysis         what heads do, rollout, ablation, compare, long-text surveys, norms, interventions
    corpus           read, stats (through analysis.heads), job (atomic shards), ray
    training         one loop for every built-in model, the generated tasks and stories, the CLI
    figures          pure figure builders (arrays + labels -> plotly), and the view of a stack
    export           files behind a view
    ui               the only Streamlit-aware part (frame, caches, links, heads) and the notebook widget
    cli, __init__    the faces: ``python -m attnviz``, ``attnviz.trace/load/show``

Shape legend, used in comments throughout:
    L  layers            H  heads            T  positions (Tq / Tk for queries / keys, Ts / Tt source / target)
    D  model width       Dh head width       F  feed-forward width       B  batch
"""

from . import export  # attnviz.export.to_npz / from_npz / matrix_csv / stats_csv / write_figures
from .backends import DEFAULT_MODEL, list_models, load
from .backends.lens import from_nnsight, from_transformer_lens
from .core.outputs import from_attentions
from .core.trace import AttentionTrace, Seq2SeqTrace
from .ui.notebook import explorer, head_view, model_view, register as _register_display, show

_register_display()  # in a notebook kernel, a trace displays itself as the explorer

__version__ = "0.2.0"


def trace(text, model=DEFAULT_MODEL, target: str | None = None):
    """Run ``model`` (a key, or a TransformerLens model) on ``text`` and return its AttentionTrace (Seq2SeqTrace
    for encoder–decoders). ``text`` may be token ids (a list or a (1, T) tensor), traced as given: specials and all.

    ``target`` is the decoder's text for encoder–decoder models; without it the model's own
    greedy output is used.
    """
    backend = load(model)
    if isinstance(text, str):
        return backend.trace(text, target)
    if not backend.can("token_ids"):
        raise ValueError(f"{backend.key} traces texts, not token ids: pass a string.")
    ids = text.reshape(-1).tolist() if hasattr(text, "reshape") else list(text)  # a (1, T) tensor or a list
    if not all(isinstance(i, int) or hasattr(i, "__index__") for i in ids):
        raise ValueError("token ids must be whole numbers: pass a string, or a list of ids")
    return backend.trace_ids([int(i) for i in ids], add_special_tokens=False)


def head_atlas(model, text: str | None = None, *, tokens: int = 2048, needles: int = 3, seed: int = 0,
               progress=None):
    """Which heads retrieve, stream, sink, and which sparse pattern each follows, on needle-in-a-haystack probes of
    ``tokens`` tokens (haystack: ``text``, or bundled sentences): a DataFrame, a row per head, each score with its
    null's upper bound (``attnviz.analysis.atlas``). ``model``: a key or a loaded backend."""
    from .analysis.atlas import head_atlas as atlas

    return atlas(load(model) if isinstance(model, str) else model, text, tokens=tokens, needles=needles, seed=seed,
                 progress=progress)


def atlas_knockout(model, atlas, k: int = 10, seed: int = 0, progress=None):
    """The needle's recall with the ``k`` top retrieval heads of ``atlas`` knocked out, against ``k`` random heads."""
    from .analysis.atlas import knockout_recall

    return knockout_recall(load(model) if isinstance(model, str) else model, atlas, k, seed, progress)


__all__ = ["trace", "head_atlas", "atlas_knockout", "list_models", "load", "AttentionTrace", "Seq2SeqTrace",
           "DEFAULT_MODEL", "show", "explorer", "head_view", "model_view", "from_attentions", "from_transformer_lens", "from_nnsight"]
