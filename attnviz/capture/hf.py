"""attnviz's attention function for transformers: it records what each call saw, then runs SDPA.

transformers 5 routes every migrated model's attention through ``AttentionInterface``: a registered function
gets ``(module, query, key, value, attention_mask, scaling, dropout, **kwargs)`` after rotary embeddings, with
grouped-query keys before repetition and ``sliding_window``, ``softcap`` or T5's ``position_bias`` among the
kwargs. Registered as "attnviz" (with SDPA's mask builder under the same name, so models build the masks they
build for SDPA), it mirrors ``sdpa_attention_forward``'s reading of those masks in a ``LayerQK`` recipe, hands
it to the active recorder, and returns SDPA's output: the forward runs at SDPA speed and no weight is made.
"""

from __future__ import annotations

import torch

from ..core.weights import LayerQK, causal_mask
from .record import active, hand_over

NAME = "attnviz"
# Arguments that change the weights in ways the recipe does not cover (gpt-oss's attention sinks): a model
# that passes them cannot be captured, and its load falls back to eager attention.
UNSUPPORTED = ("s_aux", "sinks")


def register() -> None:
    """Make ``attn_implementation="attnviz"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
              is_causal: bool | None = None, position_bias=None, softcap: float | None = None,
              sliding_window: int | None = None, **kwargs):
    """The attention of one module: (output (B, Tq, H, Dv), None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    for name in UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise ValueError(f"attnviz cannot capture attention with {name!r}")
    recorder = active()
    if recorder is None and softcap is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, position_bias=position_bias, **kwargs)
    items = [None] if recorder is None else recorder.items(query.shape[0], query.shape[2], key.shape[2])
    if softcap is not None and query.shape[0] != 1:
        raise ValueError("attnviz runs soft-capped attention one text at a time (a batch of one)")
    seen = {} if recorder is None else recorder.seen_masks
    layers = [layer_qk(module, query, key, attention_mask, scaling, is_causal, position_bias, softcap, sliding_window,
                       seen, b, n) for b, n in enumerate(items)]  # one text, or each text of a padded batch
    out = None if recorder is None else hand_over(module, layers, value)  # (H, Tq, Dv) or None
    if out is not None:  # a reducer read the weights, tile by tile, and the output came from them
        return out.transpose(0, 1).unsqueeze(0).contiguous(), None  # (1, Tq, H, Dv)
    layer = layers[0]
    if softcap is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, position_bias=position_bias, **kwargs)
    out = layer.output(value[0])  # SDPA has no soft-capping: the same weights, tile by tile (H, Tq, Dv)
    return out.transpose(0, 1).unsqueeze(0).contiguous(), None  # (1, Tq, H, Dv)


def layer_qk(module, query, key, attention_mask, scaling, is_causal, position_bias, softcap, sliding_window,
             seen: dict, item: int = 0, n: int | None = None) -> LayerQK:
    """The LayerQK of text ``item`` of one call, cut to its first ``n`` positions (all when None), reading its
    mask as ``sdpa_attention_forward`` does."""
    query, key = query[item:item + 1, :, :n], key[item:item + 1, :, :n]  # (1, H, Tq, Dh), (1, Hkv, Tk, Dh)
    Tq, Tk = query.shape[2], key.shape[2]
    causal = (is_causal if is_causal is not None else getattr(module, "is_causal", True)) and Tq > 1
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    window, mask = None, None
    if attention_mask is not None:
        mine = attention_mask[item if attention_mask.shape[0] > 1 else 0, :, :n, :n]  # (1 or H, Tq, Tk)
        if (id(attention_mask), item) not in seen:  # one model-wide mask serves every layer: read it once
            seen[id(attention_mask), item] = (attention_mask, _recipe(mine, sliding_window, Tq, Tk))
        causal, window, mask = seen[id(attention_mask), item][1]
    bias = None
    if position_bias is not None:
        pb = position_bias[item if position_bias.shape[0] > 1 else 0, :, :n, :n]  # (1 or H, Tq, Tk)
        bias = _by_offset(pb)  # (1 or H, Tq + Tk − 1)
        if bias is None:  # not a relative bias: add it whole
            pb = pb.float()
            mask = pb if mask is None else (pb + mask if mask.dtype != torch.bool else pb.masked_fill(~mask, float("-inf")))
    return LayerQK(query[0], key[0], scale, softcap=softcap, causal=causal, window=window, bias=bias, mask=mask)


def _recipe(m: torch.Tensor, sliding_window: int | None, Tq: int, Tk: int):
    """(causal, window, dense mask or None) for a (1 or H, Tq, Tk) mask, boolean or additive."""
    if m.dtype != torch.bool:
        hidden = m <= torch.finfo(m.dtype).min / 2
        if bool((m[~hidden] != 0).any()):  # values besides 0 and "hidden": keep them all
            return False, None, m.float()
        m = ~hidden
    for causal, window in dict.fromkeys([(True, sliding_window), (True, None), (False, None)]):
        allowed = causal_mask(Tq, Tk, m.device) if causal else torch.ones(Tq, Tk, dtype=torch.bool, device=m.device)
        if window is not None:
            allowed = allowed & (torch.arange(Tq, device=m.device)[:, None] + (Tk - Tq)
                                 - torch.arange(Tk, device=m.device)[None, :] < window)
        if bool((m == allowed).all()):
            return causal, window, None
    return False, None, m  # padding or another pattern: dense, as the model built it


def _by_offset(b: torch.Tensor) -> torch.Tensor | None:
    """(h, Tq + Tk − 1) values by offset j − i if the (h, Tq, Tk) bias ``b`` depends on nothing else, else None."""
    if not torch.equal(b[:, 1:, 1:], b[:, :-1, :-1]):
        return None
    return torch.cat([b[:, :, 0].flip(-1), b[:, 0, 1:]], dim=-1).float()  # offsets −(Tq−1) … Tk−1
