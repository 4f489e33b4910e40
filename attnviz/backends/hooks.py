"""Per-layer norm statistics from a Hugging Face model, read by forward hooks that live for one call.

``record(net)`` registers the hooks, the caller runs one forward pass inside the ``with`` block, and the
hooks are removed on the way out (also when the forward raises), so a model shared by all sessions stays
clean. Statistics follow ``attnviz.trace.NORM_KEYS`` and the built-in layers' definitions.
"""

from __future__ import annotations

import logging
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


def stacks(net) -> list[Stack]:
    """The layer stacks of ``net`` whose layers match a known family, in module order (encoder first)."""
    found = []
    for path, module in net.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) and (spec := _spec(module[0])):
            if all(_spec(layer) == spec for layer in module):
                found.append(Stack(path, tuple(module), spec, "decoder" in path.split(".")))
    return found


def _n_heads(config, decoder: bool) -> int:
    """Query heads of the encoder or decoder stack, from the config (sub-configs of EncoderDecoderModel)."""
    sub = getattr(config, "decoder" if decoder else "encoder", None)
    config = sub if hasattr(sub, "model_type") else config
    names = ("decoder_attention_heads",) if decoder else ()
    for name in (*names, "num_attention_heads", "num_heads", "n_head", "n_heads"):
        if isinstance(n := getattr(config, name, None), int) and n > 0:
            return n
    raise ValueError(f"cannot tell the number of attention heads of {config.model_type}")


class Recorder:
    """What the hooks saw in one forward pass; ``norms(side)`` turns it into one stack's statistics."""

    def __init__(self, net):
        self.net = net
        self.stacks = stacks(net)
        self.seen: dict[tuple, object] = {}  # (stack, layer, slot) -> tensor or (input, output)

    def hooks(self):
        """(module, hook) pairs to register: one per statistic source of every layer."""
        for s, stack in enumerate(self.stacks):
            spec = stack.spec
            for i, layer in enumerate(stack.layers):
                for slot, path in (("attn_out", spec.attn_out), ("ffn_out", spec.ffn_out), ("value", spec.value)):
                    yield _sub(layer, path), self._keep((s, i, slot), with_input=False)
                for slot, path in (("ln1", spec.ln1), ("ln2", spec.ln2)):
                    yield _sub(layer, path), self._keep((s, i, slot), with_input=True)

    def _keep(self, where: tuple, with_input: bool):
        def hook(module, args, kwargs, output):
            out = output[0] if isinstance(output, tuple) else output
            # A layer called twice (generation) keeps its last call, like the outputs do.
            if with_input:
                x = args[0] if args else next(iter(kwargs.values()))
                self.seen[where] = (x.detach()[0].float().cpu(), out.detach()[0].float().cpu())  # (T, D) each
            else:
                self.seen[where] = out.detach()[0].float().cpu()  # (T, ·)

        return hook

    def norms(self, side: str = "") -> dict:
        """{statistic: (L, T), value_norms: (L, H, T)} of one stack, {} if none or incomplete.

        ``side`` is "encoder" or "decoder" for an encoder–decoder, "" for a model with one stack.
        """
        chosen = [(i, stack) for i, stack in enumerate(self.stacks) if not side or stack.decoder == (side == "decoder")]
        if len(chosen) != 1:
            return {}
        s, stack = chosen[0]
        try:
            return self._stack_norms(s, stack)
        except (KeyError, RuntimeError, ValueError) as e:  # a layer skipped or reshaped: no statistics, still a trace
            log.warning("norm statistics of %s skipped: %s", stack.path, e)
            return {}

    def _stack_norms(self, s: int, stack: Stack) -> dict:
        H = _n_heads(self.net.config, stack.decoder)
        per_layer = []
        for i, layer in enumerate(stack.layers):
            stats = {}
            for prefix in ("ln1", "ln2"):
                x, y = self.seen[(s, i, prefix)]
                stats[f"{prefix}_in_mean"] = x.mean(-1)
                stats[f"{prefix}_in_std"] = x.std(-1, unbiased=False)
                stats[f"{prefix}_out"] = y.norm(dim=-1)
            stats["attn_out"] = self.seen[(s, i, "attn_out")].norm(dim=-1)
            stats["ffn_out"] = self.seen[(s, i, "ffn_out")].norm(dim=-1)
            out_proj = _sub(layer, stack.spec.out_proj)
            stats["value_norms"] = _value_norms(self.seen[(s, i, "value")], out_proj, stack.spec, H)
            per_layer.append(stats)
        return {k: torch.stack([p[k] for p in per_layer]).numpy() for k in per_layer[0]}  # (L, T) or (L, H, T)


def _value_norms(values: torch.Tensor, out_proj, spec: Spec, H: int) -> torch.Tensor:
    """‖f_h(x_j)‖ = ‖v_h(x_j) W_O,h‖ per head and token (Kobayashi et al. 2020): (H, T)."""
    w = out_proj.weight.detach().float().cpu()
    w = w if spec.conv1d else w.T  # (H·Dh, D)
    Dh = w.shape[0] // H
    if spec.fused_qkv:
        values = values[:, -w.shape[0]:]  # (T, H·Dh)
    T = values.shape[0]
    v = values.view(T, -1, Dh).transpose(0, 1)  # (Hkv, T, Dh)
    v = v.repeat_interleave(H // v.shape[0], dim=0)  # grouped-query attention: each kv head serves H/Hkv heads
    return (v @ w.view(H, Dh, -1)).norm(dim=-1)  # (H, T, D) -> (H, T)


@contextmanager
def record(net):
    """Hooks on ``net`` for the forward pass run inside the block; removed on exit, whatever happens."""
    rec = Recorder(net)
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
    if stacks(net):
        return ""
    kind = getattr(getattr(net, "config", None), "model_type", type(net).__name__)
    return (
        f"attnviz reads sublayer norms from {COVERED}-style layers; {kind} is wired differently, so only the "
        "residual-stream norms (from the hidden states) are shown: no LayerNorm, attention- or "
        "feed-forward-output statistics and no norm-based attention."
    )
