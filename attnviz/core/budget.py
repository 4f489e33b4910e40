"""Budgets a model must fit, read from its config before any weight is allocated (``ATTNVIZ_MAX_*``).

The size on disk says little: a 13 MB config-and-weights folder with 48 layers × 64 heads took 3 GiB per
512-token trace. So the config is read and counted; a bf16 or fp16 checkpoint loads and is counted in its own dtype.
"""

from __future__ import annotations

from .. import settings


def _first(config, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def heads(config) -> int:
    """Attention heads in all layers of the model ``config`` describes: self-attention, and cross-attention
    for encoder–decoders."""
    if hasattr(getattr(config, "encoder", None), "model_type"):  # EncoderDecoderModel: two configs inside
        return heads(config.encoder) + 2 * heads(config.decoder)  # the decoder's self- and cross-attention
    layers = _first(config, "encoder_layers", "num_hidden_layers", "n_layer", "num_layers")
    per_layer = _first(config, "encoder_attention_heads", "num_attention_heads", "n_head", "num_heads")
    if not getattr(config, "is_encoder_decoder", False):
        return layers * per_layer
    dec_layers = _first(config, "decoder_layers", "num_decoder_layers") or layers
    dec_heads = _first(config, "decoder_attention_heads") or per_layer
    return layers * per_layer + 2 * dec_layers * dec_heads


def parameters(config, kind: str) -> int:
    """The model's parameter count, from its config: built on PyTorch's meta device, so nothing is allocated."""
    import torch
    import transformers as tf

    auto = {"encoder": tf.AutoModel, "decoder": tf.AutoModelForCausalLM, "encoder-decoder": tf.AutoModelForSeq2SeqLM}
    try:
        with torch.device("meta"):
            net = auto[kind].from_config(config)
    except Exception:  # a config its class cannot build bare: the usual transformer formula instead
        return _estimate(config)
    return sum(p.numel() for p in net.parameters())  # a tied weight is one parameter, counted once


def _estimate(config) -> int:
    """Embeddings plus 4·D² (attention) and 2·D·F (feed-forward) per layer, for every stack in ``config``."""
    if hasattr(getattr(config, "encoder", None), "model_type"):
        return _estimate(config.encoder) + _estimate(config.decoder)
    width = _first(config, "hidden_size", "d_model", "n_embd")
    ffn = _first(config, "intermediate_size", "d_ff", "encoder_ffn_dim", "n_inner") or 4 * width
    layers = _first(config, "num_hidden_layers", "encoder_layers", "num_layers", "n_layer")
    layers += _first(config, "decoder_layers", "num_decoder_layers") if getattr(config, "is_encoder_decoder", 0) else 0
    return _first(config, "vocab_size") * width + layers * (4 * width * width + 2 * width * ffn)


def _over(what: str, value: str, limit: str, setting: str) -> ValueError:
    return ValueError(f"This model has {what} {value}, over this server's budget of {limit}. "
                      f"An operator can raise it with {setting}.")


def check_budget(config, kind: str) -> None:
    """A ValueError naming the budget when the model ``config`` describes is too large for this server."""
    n_heads, limit = heads(config), settings.max_heads()
    if n_heads > limit:  # first: it bounds how many modules counting the parameters would build
        raise _over("attention heads (layers × heads)", f"{n_heads:,}", f"{limit:,}", "ATTNVIZ_MAX_HEADS")
    n_params, limit_m = parameters(config, kind), settings.max_params_m()
    if n_params > limit_m * 1e6:
        name, size = dtype(config)
        raise _over("parameters", f"{n_params / 1e6:,.0f} M ({n_params * size / 2**30:,.1f} GB as {name})",
                    f"{limit_m:,.0f} M", "ATTNVIZ_MAX_PARAMS_M")


def dtype(config) -> tuple[str, int]:
    """(name, bytes per parameter) of the dtype the checkpoint is stored in and loads in (float32 if unsaid)."""
    import torch

    named = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(named, str):
        named = getattr(torch, named, None)
    if not isinstance(named, torch.dtype) or not named.is_floating_point:
        named = torch.float32
    if named not in (torch.float32, torch.bfloat16, torch.float16):
        named = torch.float32  # float64 and 8-bit checkpoints are traced as float32
    return str(named).removeprefix("torch."), named.itemsize


def check_forwards(n: int, what: str) -> None:
    """A ValueError when ``what`` needs more than ATTNVIZ_MAX_FORWARDS forward passes."""
    limit = settings.max_forwards()
    if n > limit:
        raise ValueError(f"{what} needs {n:,} forward passes, over this server's budget of {limit:,}. "
                         "An operator can raise it with ATTNVIZ_MAX_FORWARDS.")
