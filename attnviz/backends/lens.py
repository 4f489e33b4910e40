"""TransformerLens and nnsight: a TransformerLens model as an attnviz backend, and caches or traces already made.

People who study heads work in TransformerLens (``run_with_cache``, ``run_with_hooks``) or nnsight; attnviz meets
them where they are. ``LensBackend`` traces a ``TransformerBridge`` (TransformerLens 4; a ``HookedTransformer`` of
older releases has the same hook points) through its own hook points: each layer's queries and keys are read at
``hook_rot_q``/``hook_rot_k`` (after rotary embeddings) or ``hook_q``/``hook_k``, grouped-query keys before
repetition, and at ``hook_z`` the layer hands them over as attnviz's own modules do (``capture.record.hand_over``):
one recorder for the trace, the long view's reducer and interventions, and no weight made that no view shows. A
model whose weights that recipe does not reproduce is refused when it loads, in words.

``from_transformer_lens(cache, tokens)`` and ``from_nnsight(inputs, tokens)`` open what a user already ran: a
cache's patterns as they are (heads on demand when it holds the queries and keys), or the attention calls an
nnsight trace saved. TransformerLens and nnsight are optional (requirements-interop.txt): nothing here imports them.
"""

from __future__ import annotations

import threading

import numpy as np
import torch
import torch.nn.functional as F

from ..capture.hf import layer_qk
from ..capture.record import hand_over
from ..core.outputs import is_causal, stacked as dense_stack
from ..core.trace import AttentionTrace
from ..core.weights import LayerQK, OnDemandWeights
from .common import Encoded, TorchBackend, check_text, ordinary_ids

TOLERANCE = 1e-5  # the captured weights must equal the model's own hook_pattern within this on the check ids
CHECK_TOKENS = 12


def _component(attn):
    """The module that does a bridge's attention maths (its HF or native module), or a HookedTransformer's own."""
    return getattr(attn, "original_component", None) or attn


def _recipe(model, layer: int, q: torch.Tensor, k: torch.Tensor) -> LayerQK:
    """Layer ``layer``'s LayerQK from its queries (1, T, H, Dh) and keys (1, T, Hkv, Dh) as TransformerLens
    hooks give them; rotary embeddings applied by the model's own rotary module where no hook gave them applied."""
    cfg, attn = model.cfg, _component(model.blocks[layer].attn)
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # (1, H, T, Dh), (1, Hkv, T, Dh)
    if q.shape[1] != cfg.n_heads or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"layer {layer}'s queries {tuple(q.shape)} and keys {tuple(k.shape)} do not fit "
                         f"{cfg.n_heads} heads")
    if getattr(attn, "scaling", None) is not None:  # Hugging Face modules multiply
        scaling = float(attn.scaling)
    elif getattr(attn, "scale", None) is not None:  # TransformerLens' native modules divide
        scaling = 1.0 / float(attn.scale)
    elif getattr(attn, "attn_scale", None) is not None:  # a HookedTransformer divides
        scaling = 1.0 / float(attn.attn_scale)
    else:
        scaling = q.shape[-1] ** -0.5
    cap = getattr(attn, "attn_logit_softcapping", None) or getattr(attn, "attn_scores_soft_cap", None)
    return LayerQK(q[0], k[0], scaling, softcap=float(cap) if cap and cap > 0 else None,
                   causal=cfg.attention_dir == "causal" and q.shape[2] > 1,
                   window=getattr(attn, "sliding_window", None))


def _rotated(model, layer: int, got: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(queries, keys) (1, T, H or Hkv, Dh) after rotary embeddings: hook_rot_q/hook_rot_k where they fired, else
    hook_q/hook_k through the layer's rotary module (TransformerLens' native models rotate inside it)."""
    if "rot_q" in got:
        return got["rot_q"], got["rot_k"]
    q, k = got["q"], got["k"]
    if (getattr(model.cfg, "positional_embedding_type", "") or "").lower() != "rotary":
        return q, k
    rotary = getattr(_component(model.blocks[layer].attn), "rotary", None)
    if rotary is None or not hasattr(rotary, "apply_rope"):
        raise ValueError(f"layer {layer} is rotary but neither fires hook_rot_q nor has a rotary module to apply")
    q, k = rotary.apply_rope(q.transpose(1, 2), k.transpose(1, 2))  # (1, H, T, Dh), (1, Hkv, T, Dh)
    return q.transpose(1, 2), k.transpose(1, 2)  # (1, T, H, Dh), (1, T, Hkv, Dh)


def checked_model(model):
    """``model`` if it is a TransformerLens model attnviz can trace, else a ValueError in plain words."""
    if not all(hasattr(model, a) for a in ("cfg", "blocks", "hooks")):
        raise ValueError(f"attnviz.load takes a model key or a TransformerLens model (a TransformerBridge), "
                         f"not a {type(model).__name__}.")
    if getattr(model, "tokenizer", None) is None:
        raise ValueError("This TransformerLens model has no tokenizer: boot it with one (tokenizer=…) so attnviz "
                         "can show its tokens, or open a cache with attnviz.from_transformer_lens(cache, tokens).")
    return model


class LensBackend(TorchBackend):
    """A TransformerLens model: traces, token ids, next-token logits, head ablation and interventions."""

    def __init__(self, model, key: str):
        self.net, self.key = checked_model(model), key
        cfg = model.cfg
        self.tokenizer = model.tokenizer
        self.kind = "decoder" if cfg.attention_dir == "causal" else "encoder"
        self.abilities = frozenset({"token_ids", "ablation", "positions"} | ({"outputs"} if self.kind == "decoder" else set()))
        self.n_layers, self.n_heads = cfg.n_layers, cfg.n_heads
        self.position_limit = cfg.n_ctx
        self.prepend_bos = bool(getattr(cfg, "default_prepend_bos", False)) and self.tokenizer.bos_token_id is not None
        self.lock = threading.Lock()
        self.description = (f"TransformerLens {type(model).__name__} {getattr(cfg, 'model_name', '')}: "
                            f"{self.n_layers} layers × {self.n_heads} heads, {self.kind}, up to {cfg.n_ctx:,} tokens")
        self._check()

    @property
    def norm_note(self) -> str:
        return ("TransformerLens models show the residual-stream norms (from the hidden states); attnviz reads no "
                "LayerNorm, attention- or feed-forward-output statistics from them.")

    def position_info(self):
        """The model's positions as its config states them: learned vectors (W_pos) or rotary frequencies."""
        from .positions import PositionInfo, rotary_frequencies

        cfg = self.net.cfg
        kind = (getattr(cfg, "positional_embedding_type", "") or "standard").lower()
        if kind == "rotary":
            d_rot, base = cfg.rotary_dim or cfg.d_head, float(cfg.rotary_base)
            scaled = isinstance(getattr(cfg, "rope_scaling", None), dict)
            return PositionInfo("rotary", None, rotary_frequencies(d_rot, base), (
                f"{self.key} has no position vector to show: rotary embeddings (Su et al. 2021) rotate each pair of "
                f"query and key dimensions by p·θᵢ before the dot product. θᵢ = base^(−2i/d) with base {base:g} and "
                f"d = {d_rot} rotated dimensions per head" + (", before the config's rope scaling." if scaled else ".")))
        if kind == "standard":
            table = self.net.W_pos.detach().float().cpu().numpy()  # (P, D)
            return PositionInfo("learned", table, None, f"{self.key} adds {table.shape[0]} learned position vectors "
                                f"of width {table.shape[1]} (W_pos) to the token embeddings.")
        return PositionInfo("none", None, None, f"attnviz does not read {kind!r} positions from TransformerLens models.")

    def _check(self) -> None:
        """Refuse a model whose own patterns (hook_pattern) the captured recipe does not reproduce."""
        ids = self.plain_ids()[:CHECK_TOKENS]
        patterns = {}
        keep = lambda n: lambda p, hook: patterns.__setitem__(n, p[0].detach().float())  # noqa: E731
        names = [f"blocks.{i}.attn.hook_pattern" for i in range(self.n_layers)]
        trace, _ = self._run(ids, extra=[(n, keep(n)) for n in names])
        gap = max(float((torch.from_numpy(trace.weights.layer(i)) - patterns[n]).abs().max())
                  for i, n in enumerate(names))
        if not gap <= TOLERANCE:
            raise ValueError(f"attnviz cannot reproduce {self.key}'s attention from its queries and keys (largest "
                             f"gap {gap:.2g} from its hook_pattern): open a cache with attnviz.from_transformer_lens.")

    def plain_ids(self) -> list[int]:
        return ordinary_ids(self.tokenizer, self.net.cfg.d_vocab)

    def _hooks(self, hidden: list):
        """Forward hooks that capture each layer's queries, keys and values and hand them over at hook_z."""
        got: dict[int, dict] = {}
        hooks = []
        for i in range(self.n_layers):
            def keep(name, i=i):  # hook.name may be the canonical name (q.hook_out) of the alias hook_q
                return lambda t, hook: got.setdefault(i, {}).__setitem__(name, t)
            def attend(z, hook, i=i):
                seen = got.pop(i)
                q, k = _rotated(self.net, i, seen)
                out = hand_over(self.net.blocks[i].attn, [_recipe(self.net, i, q, k)], seen["v"].transpose(1, 2))
                return None if out is None else out.transpose(0, 1)[None].to(z.dtype)  # (H, T, Dv) -> (1, T, H, Dv)
            def resid(t, hook, i=i):
                hidden[i] = t.detach()
            rotated = f"blocks.{i}.attn.hook_rot_q" in self.net.hook_dict
            names = ["q", "k", "v"] + (["rot_q", "rot_k"] if rotated else [])
            hooks += [(f"blocks.{i}.attn.hook_{n}", keep(n)) for n in names]
            hooks += [(f"blocks.{i}.attn.hook_z", attend), (f"blocks.{i}.hook_resid_pre", resid)]
        last = lambda t, hook: hidden.__setitem__(self.n_layers, t.detach())  # noqa: E731
        return hooks + [(f"blocks.{self.n_layers - 1}.hook_resid_post", last)]

    def _run(self, ids: list, text: str = "", truncated: int = 0, extra=()) -> tuple[AttentionTrace, torch.Tensor]:
        """(trace, logits (T, V)) of one recorded forward of ``ids``; ``extra`` hooks run alongside attnviz's."""
        if not 0 < len(ids) <= self.max_tokens:
            raise ValueError(f"{len(ids)} tokens: this model takes 1 to {self.max_tokens:,}.")
        tok = self.tokenizer
        special = np.array(tok.get_special_tokens_mask(ids, already_has_special_tokens=True), dtype=bool)
        enc = Encoded(list(ids), tuple(tok.convert_ids_to_tokens(list(ids))), special, None, truncated)
        hidden = [None] * (self.n_layers + 1)
        device = next(self.net.parameters()).device
        with self.recorded() as run, \
                self.net.hooks(fwd_hooks=self._hooks(hidden) + list(extra)):  # removed on exit, whatever happens
            logits = self.net(torch.tensor([list(ids)], device=device))  # (1, T, V)
            trace = run.trace(enc, text or tok.decode(list(ids)), self.kind, hidden, norms={})
        return trace, logits[0].float().cpu()

    def _ids(self, text: str, limit: int) -> tuple[list, int]:
        """The text's ids as the model's own ``to_tokens`` makes them, cut to ``limit``; how many were cut."""
        ids = self.net.to_tokens(check_text(text), truncate=False)[0].tolist()
        return ids[:limit], max(0, len(ids) - limit)

    def _wrapped(self, ids: list) -> list:
        return [self.tokenizer.bos_token_id, *ids] if self.prepend_bos else list(ids)

    def trace(self, text: str, target: str | None = None, max_tokens: int | None = None) -> AttentionTrace:
        ids, cut = self._ids(text, self.limit(max_tokens))
        return self._run(ids, text, cut)[0]

    def trace_ids(self, ids: list, add_special_tokens: bool = True) -> AttentionTrace:
        """The trace of token ids as given (``add_special_tokens``: after BOS where the model prepends one)."""
        return self._run(self._wrapped(list(ids)) if add_special_tokens else list(ids))[0]

    def run_with_trace(self, text) -> tuple[AttentionTrace, torch.Tensor]:
        """(trace, next-token logits (T, V)) of a text, or of token ids (a list, wrapped as ``trace_ids`` wraps
        them), in one forward."""
        if self.kind != "decoder":
            raise ValueError(f"Next-token logits need a causal language model; {self.key} is an {self.kind}.")
        if isinstance(text, str):
            ids, cut = self._ids(text, self.limit())
            return self._run(ids, text, cut)
        return self._run(self._wrapped(list(text)))

    def ablation(self, text: str, max_tokens: int | None = None):
        """("lm", run): the mean next-token loss with each head's output (hook_z) scaled by ``head_mask`` (L, H)."""
        if self.kind != "decoder":
            raise ValueError("Head ablation of a TransformerLens model measures its next-token loss: a causal LM.")
        ids, _ = self._ids(text, self.limit(max_tokens))
        if len(ids) < 2:
            raise ValueError("The next-token loss needs at least two tokens: enter a longer text.")
        x = torch.tensor([ids], device=next(self.net.parameters()).device)  # (1, T)

        def run(head_mask):
            mask = torch.as_tensor(np.asarray(head_mask), dtype=torch.float32)  # (L, H)
            scale = lambda i: lambda z, hook: z * mask[i].to(z)[:, None]  # noqa: E731  (1, T, H, Dh) by (H, 1)
            with self.lock, torch.inference_mode(), self.net.hooks(
                    fwd_hooks=[(f"blocks.{i}.attn.hook_z", scale(i)) for i in range(self.n_layers)]):
                logits = self.net(x)[0]  # (T, V)
            return F.cross_entropy(logits[:-1].double(), x[0, 1:])

        return "lm", run


def name_of(model) -> str:
    """``lens:<the model's name>``: the key a TransformerLens model is registered under."""
    return "lens:" + str(getattr(getattr(model, "cfg", None), "model_name", "") or type(model).__name__)


def _rows(t, item: int | None, what: str) -> torch.Tensor:
    """One text of a batched cache entry: the tensor without its batch axis."""
    t = torch.as_tensor(t) if not isinstance(t, torch.Tensor) else t
    if t.shape[0] != 1 and item is None:
        raise ValueError(f"{what} holds a batch of {t.shape[0]} texts: pass item= (which one to open).")
    return t[item or 0].detach().float().cpu()


def _token_strings(tokens, tokenizer) -> list[str]:
    """Token strings from strings, or from ids (a list, array or (1, T) tensor) through ``tokenizer``."""
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.reshape(-1).tolist()  # (1, T) or (T,) -> (T,)
    tokens = list(tokens)
    if tokens and all(isinstance(t, (int, np.integer)) for t in tokens):
        if tokenizer is None:
            raise ValueError("token ids need a tokenizer to name them: pass tokenizer=, or the token strings")
        return list(tokenizer.convert_ids_to_tokens([int(t) for t in tokens]))
    return [str(t) for t in tokens]


def _special(tokens: list[str], tokenizer) -> np.ndarray | None:
    return None if tokenizer is None else np.array([t in tokenizer.all_special_tokens for t in tokens])


def from_transformer_lens(cache, tokens, model: str = "", item: int | None = None) -> AttentionTrace:
    """A trace of a TransformerLens ``ActivationCache``: heads on demand from its queries and keys where it holds
    them (with the model that made it), else its patterns as they are (``cache["pattern", l]``). ``tokens``: the
    token strings or ids (``model.to_str_tokens``/``to_tokens``); ``item`` picks one text of a batched cache."""
    lens = getattr(cache, "model", None)
    keys = set(cache.keys())
    n = sum(1 for k in keys if k.endswith(".attn.hook_pattern"))
    n = n or sum(1 for k in keys if k.endswith(".attn.hook_q"))
    if not n:
        raise ValueError("this cache holds no attention: run_with_cache with the blocks' hook_pattern, or their "
                         "hook_q and hook_k")
    tokenizer = getattr(lens, "tokenizer", None)
    toks = _token_strings(tokens, tokenizer)
    name = model or str(getattr(getattr(lens, "cfg", None), "model_name", "") or "transformer-lens")
    wanted = ("q", "k") + (("rot_q", "rot_k") if "blocks.0.attn.hook_rot_q" in keys else ())
    if lens is not None and all(f"blocks.{i}.attn.hook_{w}" in keys for i in range(n) for w in wanted):
        layers = []
        for i in range(n):
            got = {w: _rows(cache[f"blocks.{i}.attn.hook_{w}"], item, w)[None] for w in wanted}  # (1, T, H, Dh)
            layers.append(_recipe(lens, i, *_rotated(lens, i, got)))
        weights = OnDemandWeights(layers)
        kind = "decoder" if layers[0].causal else "encoder"
        return AttentionTrace(toks, weights=weights, special=_special(toks, tokenizer), model=name, kind=kind,
                              capture="interface")
    if not all(f"blocks.{i}.attn.hook_pattern" in keys for i in range(n)):
        raise ValueError("this cache holds queries and keys but not the model that made them (cache.model), and "
                         "no hook_pattern: run_with_cache on the model, or keep the patterns")
    attn = dense_stack([_rows(cache[f"blocks.{i}.attn.hook_pattern"], item, "hook_pattern")[None]
                        for i in range(n)], "cache patterns")  # (L, H, T, T)
    return AttentionTrace(toks, attn, special=_special(toks, tokenizer), model=name,
                          kind="decoder" if is_causal(attn) else "encoder", capture="dense")


def from_nnsight(inputs, tokens, tokenizer=None, model: str = "") -> AttentionTrace:
    """A trace of the attention calls an nnsight trace saved: per layer, the ``.inputs`` of a Hugging Face
    attention module's attention-interface call, ``(args, kwargs)`` with args (module, query, key, value,
    attention_mask), read as attnviz's own attention function reads them (``attnviz.capture.hf.layer_qk``)::

        saved = []
        with lm.trace(ids):
            for layer in lm.model.layers:
                saved.append(layer.self_attn.source.attention_interface_1.inputs.save())
        trace = attnviz.from_nnsight(saved, ids, tokenizer=lm.tokenizer)
    """
    layers, seen = [], {}
    for i, call in enumerate(inputs):
        try:
            args, kwargs = call
            module, query, key, _, mask = args[:5]
        except (TypeError, ValueError):
            raise ValueError(f"inputs[{i}] is not an attention call's saved inputs ((module, query, key, value, "
                             "mask), kwargs)") from None
        if query.shape[0] != 1:
            raise ValueError(f"inputs[{i}] holds a batch of {query.shape[0]} texts: trace one text")
        k = dict(kwargs)
        layers.append(layer_qk(module, query.detach(), key.detach(), mask, k.get("scaling"), k.get("is_causal"),
                               k.get("position_bias"), k.get("softcap"), k.get("sliding_window"), seen))
    if not layers:
        raise ValueError("no attention calls were saved: save each layer's attention-interface inputs")
    toks = _token_strings(tokens, tokenizer)
    return AttentionTrace(toks, weights=OnDemandWeights(layers), special=_special(toks, tokenizer),
                          model=model or "nnsight", kind="decoder" if layers[0].causal else "encoder",
                          capture="interface")
