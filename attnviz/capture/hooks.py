"""Per-layer norm statistics of a model (Hugging Face or attnviz's own), read by forward hooks for one call.

``norm_hooks(net)`` registers the hooks, the caller runs one forward pass inside the ``with`` block, and the
hooks are removed on the way out (also when the forward raises), so a model shared by all sessions stays
clean. Statistics follow ``attnviz.core.trace.NORM_KEYS`` and the built-in layers' definitions.
"""

from __future__ import annotations

import logging
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch


log = logging.getLogger("attnviz")


@dataclass(frozen=True)
class Spec:
    """Where one layer family keeps its sublayers, as dotted paths inside a layer (``-1``: the last entry)."""

    family: str
    attn_out: str  # output = the attention sublayer's update to the residual stream
    ffn_out: str  # output = the feed-forward sublayer's update
    ln1: str  # the attention sublayer's norm: its input and output
    ln2: str  # the feed-forward sublayer's norm
    value: str  # output = value vectors (B, T, Hkv·Dh)
    out_proj: str  # weight maps the concatenated heads back to D
    fused_qkv: bool = False  # GPT-2's c_attn returns q, k, v side by side: values are the last third
    conv1d: bool = False  # GPT-2's Conv1D stores its weight as (in, out), not (out, in)
    absent: str = ""  # a submodule whose presence means the layer is wired differently


SPECS = (
    Spec("BERT", "attention.output.dense", "output.dense", "attention.output.LayerNorm", "output.LayerNorm",
         "attention.self.value", "attention.output.dense"),
    Spec("DistilBERT", "attention.out_lin", "ffn", "sa_layer_norm", "output_layer_norm",
         "attention.v_lin", "attention.out_lin"),
    Spec("GPT-2", "attn.c_proj", "mlp", "ln_1", "ln_2", "attn.c_attn", "attn.c_proj", fused_qkv=True, conv1d=True),
    # Gemma 2/3 normalise the attention output before the residual: the hooks would mislabel their norms.
    Spec("Llama", "self_attn.o_proj", "mlp", "input_layernorm", "post_attention_layernorm",
         "self_attn.v_proj", "self_attn.o_proj", absent="pre_feedforward_layernorm"),
    Spec("T5", "layer.0.SelfAttention.o", "layer.-1.DenseReluDense", "layer.0.layer_norm", "layer.-1.layer_norm",
         "layer.0.SelfAttention.v", "layer.0.SelfAttention.o"),
    Spec("BART", "self_attn.out_proj", "fc2", "self_attn_layer_norm", "final_layer_norm",
         "self_attn.v_proj", "self_attn.out_proj"),
    # attnviz's own layers (attnviz.nn): the decoder's feed-forward sublayer is its third.
    Spec("attnviz", "self_attn.out_proj", "ffn", "sub1.norm", "sub2.norm", "self_attn.v_proj", "self_attn.out_proj",
         absent="sub3"),
    Spec("attnviz decoder", "self_attn.out_proj", "ffn", "sub1.norm", "sub3.norm", "self_attn.v_proj",
         "self_attn.out_proj"),
)  # fmt: skip

COVERED = ", ".join(s.family for s in SPECS)


def _sub(module, path: str):
    """The submodule at dotted ``path`` (integers index ModuleLists), or None."""
    for part in path.split("."):
        if part.lstrip("-").isdigit():
            try:
                module = module[int(part)]
            except (TypeError, IndexError):
                return None
        else:
            module = getattr(module, part, None)
        if not isinstance(module, torch.nn.Module):
            return None
    return module


def _spec(layer) -> Spec | None:
    for s in SPECS:
        paths = (s.attn_out, s.ffn_out, s.ln1, s.ln2, s.value, s.out_proj)
        if all(_sub(layer, p) is not None for p in paths) and not (s.absent and _sub(layer, s.absent)):
            return s
    return None


@dataclass(frozen=True)
class Stack:
    """One stack of layers the hooks understand: its path in the model, its layers, their wiring."""

    path: str
    layers: tuple
    spec: Spec
    decoder: bool


_FOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its stacks, found once


def layer_stacks(net) -> list[Stack]:
    """The layer stacks of ``net`` whose layers match a known family, in module order (encoder first).

    A model's layers do not change, so the walk over its modules (a few ms at 20 tokens' scale) runs once."""
    if net not in _FOUND:
        found = []
        for path, module in net.named_modules():
            if isinstance(module, torch.nn.ModuleList) and len(module) and (spec := _spec(module[0])):
                if all(_spec(layer) == spec for layer in module):
                    found.append(Stack(path, tuple(module), spec, "decoder" in path.split(".")))
        _FOUND[net] = found
    return _FOUND[net]


def _n_heads(config, decoder: bool) -> int:
    """Query heads of the encoder or decoder stack, from the config (sub-configs of EncoderDecoderModel)."""
    sub = getattr(config, "decoder" if decoder else "encoder", None)
    config = sub if hasattr(sub, "model_type") else config
    names = ("decoder_attention_heads",) if decoder else ()
    for name in (*names, "num_attention_heads", "num_heads", "n_head", "n_heads"):
        if isinstance(n := getattr(config, name, None), int) and n > 0:
            return n
    raise ValueError(f"cannot tell the number of attention heads of {config.model_type}")


HOOKED_NORMS = ("ln1_in_mean", "ln1_in_std", "ln1_out", "ln2_in_mean", "ln2_in_std", "ln2_out", "attn_out", "ffn_out")


def _rows(t) -> torch.Tensor:
    """The batch's only row of a module's output (the first element of a tuple): (T, ·). OPT flattens its
    hidden states to (B·T, D) inside a layer: for a batch of one that is (T, D) already."""
    t = (t[0] if isinstance(t, tuple) else t).detach()
    return t.reshape(-1, t.shape[-1]).float()  # (1, T, ·) or (T, ·) -> (T, ·)


class NormRecorder:
    """Per-token statistics the hooks computed in one forward pass; ``norms(side)`` gives one stack's.

    Hooks reduce each tensor as it passes, so a long text in a deep model keeps (L, H, T) numbers, not (L, T, D).
    A layer called twice (generation) keeps its last call's statistics, as the model's outputs do.
    """

    def __init__(self, net):
        self.stacks, self.heads = [], []
        for stack in layer_stacks(net):
            try:
                self.heads.append(_n_heads(net.config, stack.decoder))
                self.stacks.append(stack)
            except ValueError as e:  # statistics are optional: the trace goes on without them
                log.warning("no norm statistics for %s: %s", stack.path, e)
        self.seen: dict[tuple, torch.Tensor] = {}  # (stack, layer, statistic) -> (T,) or (H, T)

    def hooks(self):
        """(module, hook) pairs to register for every layer of every stack."""
        for s, (stack, H) in enumerate(zip(self.stacks, self.heads)):
            spec = stack.spec
            for i, layer in enumerate(stack.layers):
                yield _sub(layer, spec.attn_out), self._norm((s, i, "attn_out"))
                yield _sub(layer, spec.ffn_out), self._norm((s, i, "ffn_out"))
                yield _sub(layer, spec.ln1), self._norm_stats(s, i, "ln1")
                yield _sub(layer, spec.ln2), self._norm_stats(s, i, "ln2")
                yield _sub(layer, spec.value), self._values((s, i, "value_norms"), _sub(layer, spec.out_proj), spec, H)

    def _norm(self, where: tuple):
        def hook(module, args, kwargs, output):
            self.seen[where] = _rows(output).norm(dim=-1).cpu()  # (T,)

        return hook

    def _norm_stats(self, s: int, i: int, prefix: str):
        def hook(module, args, kwargs, output):
            x = _rows(args[0] if args else next(iter(kwargs.values())))  # (T, D) the norm's input
            mean = x.mean(-1)  # (T,)
            self.seen[(s, i, f"{prefix}_in_mean")] = mean.cpu()
            # Biased, as layer norm's; squared in place (no second (T, D) buffer; var_mean and .std: slower)
            self.seen[(s, i, f"{prefix}_in_std")] = (x - mean[:, None]).square_().mean(-1).sqrt().cpu()
            self.seen[(s, i, f"{prefix}_out")] = _rows(output).norm(dim=-1).cpu()

        return hook

    def _values(self, where: tuple, out_proj, spec: Spec, H: int):
        def hook(module, args, kwargs, output):
            try:
                self.seen[where] = _value_norms(_rows(output), out_proj, spec, H).cpu()  # (H, T)
            except RuntimeError as e:  # an unexpected shape: leave this statistic out, never break the forward
                log.warning("value norms skipped: %s", e)

        return hook

    def norms(self, side: str = "") -> dict:
        """{statistic: (L, T), value_norms: (L, H, T)} of one stack, {} if none or incomplete.

        ``side`` is "encoder" or "decoder" for an encoder–decoder, "" for a model with one stack.
        """
        chosen = [i for i, stack in enumerate(self.stacks) if not side or stack.decoder == (side == "decoder")]
        if len(chosen) != 1:
            return {}
        s, L = chosen[0], len(self.stacks[chosen[0]].layers)
        try:
            out = {k: torch.stack([self.seen[(s, i, k)] for i in range(L)]).numpy() for k in (*HOOKED_NORMS, "value_norms")}
        except (KeyError, RuntimeError) as e:  # a layer skipped or a length changed: no statistics, still a trace
            log.warning("norm statistics of %s skipped: %s", self.stacks[s].path, e)
            return {}
        return out  # (L, T) each, value_norms (L, H, T)


def _value_norms(values: torch.Tensor, out_proj, spec: Spec, H: int) -> torch.Tensor:
    """‖f_h(x_j)‖ = ‖v_h(x_j) W_O,h‖ per head and token (Kobayashi et al. 2020): (H, T)."""
    w = out_proj.weight.detach().float()
    w = w if spec.conv1d else w.T  # (H·Dh, D)
    Dh = w.shape[0] // H
    if spec.fused_qkv:
        values = values[:, -w.shape[0]:]  # (T, H·Dh)
    T = values.shape[0]
    v = values.reshape(T, -1, Dh).transpose(0, 1)  # (Hkv, T, Dh)
    if v.shape[0] != H:  # grouped-query attention: each kv head serves H/Hkv heads
        v = v.repeat_interleave(H // v.shape[0], dim=0)
    return head_value_norms(v, w.reshape(H, Dh, -1))  # (H, T, Dh), (H, Dh, D) -> (H, T)


def head_value_norms(v, w_o):
    """‖v_h W_O,h‖ per head and position (Kobayashi et al. 2020): values v (..., H, T, Dh) and each head's
    slice of the output projection w_o (H, Dh, D) -> (..., H, T).

    ‖v W‖² = v (W Wᵀ) vᵀ: a Dh×Dh Gram matrix per head instead of widening every value to D.
    """
    gram = w_o @ w_o.transpose(-2, -1)  # (H, Dh, Dh)
    return (v @ gram).mul_(v).sum(-1).clamp(min=0).sqrt()  # (..., H, T); in place: no second buffer


@contextmanager
def norm_hooks(net):
    """Hooks on ``net`` for the forward pass run inside the block; removed on exit, whatever happens."""
    rec = NormRecorder(net)
    handles = []
    try:
        for module, hook in rec.hooks():
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        yield rec
    finally:
        for h in handles:
            h.remove()


def missing_note(net) -> str:
    """Empty when the hooks cover ``net``; otherwise what the Norms page can and cannot show for it."""
    if layer_stacks(net):
        return ""
    kind = getattr(getattr(net, "config", None), "model_type", type(net).__name__)
    return (
        f"attnviz reads sublayer norms from {COVERED}-style layers; {kind} is wired differently, so only the "
        "residual-stream norms (from the hidden states) are shown: no LayerNorm, attention- or "
        "feed-forward-output statistics and no norm-based attention."
    )


def projections(net, n_layers: int) -> list[torch.nn.Module]:
    """Each layer's attention output projection (its input: the heads side by side), or a ValueError."""
    found = layer_stacks(net)
    if len(found) != 1 or len(found[0].layers) != n_layers:
        kind = getattr(getattr(net, "config", None), "model_type", type(net).__name__)
        raise ValueError(
            f"Head ablation does not know where {kind} keeps its attention output projections; "
            "it supports BERT-, DistilBERT-, GPT-2-, Llama- and BART-style encoders and causal LMs."
        )
    stack = found[0]
    return [layer.get_submodule(stack.spec.out_proj) for layer in stack.layers]


@contextmanager
def heads_masked(projs: list[torch.nn.Module], head_mask: np.ndarray):
    """Scale each head's slice of the output projections' input by ``head_mask`` (L, H) for the calls
    inside the block; the hooks are removed on exit, whatever happens."""
    mask = torch.as_tensor(np.asarray(head_mask), dtype=torch.float32)
    H = mask.shape[1]

    def hook_for(m: torch.Tensor):
        def scale(module, args):
            x = args[0]
            Dh = x.shape[-1] // H
            return (x * m.to(x).repeat_interleave(Dh), *args[1:])  # (B, T, H·Dh) × (H·Dh,)

        return scale

    handles = []
    try:
        for proj, m in zip(projs, mask):
            if not bool((m == 1).all()):
                handles.append(proj.register_forward_pre_hook(hook_for(m)))
        yield
    finally:
        for h in handles:
            h.remove()
