"""Any pretrained Hugging Face model as a backend: encoders, decoders and encoder–decoders.

``load_hf(name)`` takes a local folder or a hub id, refuses what is unsafe (custom code, pickle checkpoints,
oversized weights) with a plain message, and returns an ``HFModel`` whose ``trace`` matches the builtin one.
Models run with attnviz's attention function (``attnviz.capture.hf``): SDPA speed, queries and keys captured, weights
on demand. A model it does not reach exactly — checked against eager attention when it loads — runs eager, and
its traces say so (``capture == "eager"``); one it cannot trace exactly at all is refused in words (``refusal``).
Checkpoints load in their own dtype (bf16 stays bf16); ``check(name)`` is one model's support-matrix row.

What may be loaded and from where (no custom code, safetensors only, sizes) is ``hub``'s; what "exact" means and
the comparison with eager attention are ``check``'s: this module loads what ``hub`` admits and traces it.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .. import settings
from . import gguf
from .generation import Generation, Sampling, top_next
from ..core.trace import AttentionTrace, Seq2SeqTrace, stacks
from ..core.weights import DenseWeights
from ..capture import hf as hf_attention
from .common import (Encoded, Scorer, TorchBackend, check_text, encode, has_chat_template, log_odds, ordinary_ids,
                     stacked, wrapped)
from .check import CHECK_TARGET, CHECK_TEXT, TOLERANCE, Check, against_eager, gap as check_gap
from .hub import AUTO, admit_config, admit_folder, admit_gguf, kind_of, locate, refusal
from .trained import ENCODER_DECODER_ABLATION

log = logging.getLogger("attnviz")


# Families whose learned positions start after the padding index (RoBERTa's offset of pad_token_id + 1).
PAD_OFFSET_POSITIONS = {
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "data2vec-text",
    "xmod", "roberta-prelayernorm", "mpnet", "ibert",
}

# Tensors a checkpoint may lack without changing attention or hidden states.
HARMLESS_MISSING = ("pooler", "lm_head", "final_logits_bias")

# A model that adds a bias or a dense mask to its scores (T5's relative bias) builds (H, T, T) tensors itself in
# every forward, whatever attnviz keeps: T5 peaks at 24 GB for 10,000 tokens. Such models take this many.
QUADRATIC_MAX_TOKENS = 2048


def load_hf(name: str) -> "HFModel":
    """The Hugging Face model in folder ``name`` (or hub id ``name``, or GGUF file ``name``), checked and ready to
    trace."""
    name = (name or "").strip()
    if not name:
        raise ValueError("Give a Hugging Face model id (hf:bert-base-uncased) or a local folder (hf:/path/to/folder).")
    folder = locate(name)
    if folder.is_file():
        return _load_gguf(folder, name)
    config, kind, safe = admit_folder(folder, name)
    return HFModel(f"hf:{name}", _load_model(folder, kind, safe, config), _load_tokenizer(folder), kind, config)


def _load_gguf(file: Path, name: str) -> "HFModel":
    """The model in GGUF file ``file``, dequantised to float32 by transformers, then checked as a folder's is.
    Refused before any weight is read when transformers cannot read its family or its float32 weights are too big."""
    from transformers import AutoConfig

    header = admit_gguf(file, name)
    try:
        config = AutoConfig.from_pretrained(file.parent, gguf_file=file.name)
    except Exception as e:  # a header transformers' GGUF reader does not follow
        raise ValueError(f"transformers could not read the settings in {file}: {_cause(e)}") from None
    kind = kind_of(config)
    admit_config(config, kind)
    net = _load_model(file.parent, kind, False, config, gguf_file=file.name)
    return HFModel(f"hf:{name}", net, _load_tokenizer(file.parent, file.name), kind, config, gguf.description(header))


def _model_class(config, kind: str):
    """The class ``from_pretrained`` will build for ``config`` (None where the auto mapping has none)."""
    import transformers as tf

    try:
        cls = getattr(tf, AUTO[kind])._model_mapping[type(config)]
    except (KeyError, ValueError):
        return None
    if isinstance(cls, tuple):  # several classes for one config (Funnel): the one the config names
        names = getattr(config, "architectures", None) or []
        cls = next((c for c in cls if c.__name__ in names), cls[0])
    return cls


def capturable(config, kind: str) -> bool:
    """Whether the model's attention modules call transformers' attention interface, where attnviz's function sees
    them. Other classes read the implementation's name themselves (a table of classes, an ``if sdpa``) and would
    run eager maths over attnviz's masks: they load eager from the start."""
    cls = _model_class(config, kind)
    return cls is not None and bool(cls._can_set_attn_implementation())


def _cause(e: Exception) -> str:
    """An exception in words: a bare KeyError's message is only the missing key."""
    text = str(e).strip() or "no message"
    return f"{type(e).__name__} {text}" if isinstance(e, (KeyError, IndexError, AttributeError)) else text


def _load_model(folder: Path, kind: str, safe: bool, config, gguf_file: str | None = None):
    """The model in eval mode and its own dtype (a GGUF file's: float32), with attnviz's attention function where its
    modules call the attention interface, else eager; a load that fails with attnviz's function is retried eager once."""
    import transformers as tf

    source = dict(gguf_file=gguf_file, dtype=torch.float32) if gguf_file else dict(use_safetensors=safe, dtype="auto")
    hf_attention.register()
    chosen = [hf_attention.NAME, "eager"] if capturable(config, kind) else ["eager"]
    failures = []
    for implementation in chosen:
        try:
            net, info = getattr(tf, AUTO[kind]).from_pretrained(
                folder,
                attn_implementation=implementation,
                **source,
                trust_remote_code=False,
                output_loading_info=True,
            )
        except Exception as e:  # the loaders raise many types for one cause: these weights cannot be used
            failures.append(f"with {implementation} attention: {_cause(e)}")
            continue
        if net.config._attn_implementation != implementation:  # transformers only warns when it cannot switch
            failures.append(f"with {implementation} attention: it runs {net.config._attn_implementation!r}")
            continue
        break
    else:
        raise ValueError(f"Could not load the {config.model_type} model in {folder}: {'; '.join(failures)}.")
    missing = sorted(k for k in info["missing_keys"] if not any(h in k for h in HARMLESS_MISSING))
    if missing or info["mismatched_keys"]:
        bad = missing or sorted(str(k) for k in info["mismatched_keys"])
        raise ValueError(
            f"The weights in {folder} do not fit its config: {len(bad)} tensors missing or misshapen "
            f"(e.g. {', '.join(bad[:3])}); the model would run on random weights."
        )
    if net.dtype not in TOLERANCE:
        net = net.float()  # an 8-bit or float64 checkpoint: float32 is what the comparisons are stated for
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return net.to(device).eval()


def _load_tokenizer(folder: Path, gguf_file: str | None = None):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file, trust_remote_code=False)
    except Exception as e:  # missing files or a tokenizer class that needs extra packages
        raise ValueError(f"Could not load the tokenizer in {folder}: {e}") from None


def _position_limit(config) -> int | None:
    """How many positions the (encoder's) learned or rotary position table holds, if it has one."""
    sub = getattr(config, "encoder", None)
    config = sub if hasattr(sub, "model_type") else config  # EncoderDecoderModel: the encoder's limit
    for attr in ("max_position_embeddings", "n_positions"):
        limit = getattr(config, attr, None)
        if isinstance(limit, int) and limit > 0:
            if config.model_type in PAD_OFFSET_POSITIONS:
                limit -= (config.pad_token_id or 0) + 1
            return limit
    return None


def _decoder_start(net, tokenizer) -> int:
    """The token an encoder–decoder's decoder begins with (T5/Marian: pad, BART: </s>, BERT2BERT: [CLS])."""
    gen = getattr(net, "generation_config", None)
    candidates = (
        getattr(gen, "decoder_start_token_id", None),
        getattr(net.config, "decoder_start_token_id", None),
        getattr(getattr(net.config, "decoder", None), "bos_token_id", None),
        tokenizer.bos_token_id,
        tokenizer.cls_token_id,
        tokenizer.pad_token_id,
    )
    start = next((c for c in candidates if isinstance(c, int)), None)
    if start is None:
        raise ValueError("This encoder–decoder has no decoder start token (decoder_start_token_id) in its config.")
    return start


@contextmanager
def _before_projection(net):
    """[the input of the model's final projection to another width] after a forward inside the block (OPT-350m's
    ``project_out`` maps its 1,024-wide residual stream to 512-wide embeddings); [] without one."""
    seen = []
    proj = next((m for name, m in net.named_modules() if name.endswith("project_out") and m is not None), None)
    if proj is None:
        yield seen
        return

    def keep(module, args, output):
        seen[:] = [args[0]]

    handle = proj.register_forward_hook(keep)
    try:
        yield seen
    finally:
        handle.remove()


def causal_leak(weights) -> str:
    """Empty when no query of a causal stack can see a later key; else what lets it."""
    if isinstance(weights, DenseWeights):
        upper = float(np.triu(weights.array, 1).max()) if weights.array.shape[2] > 1 else 0.0
        return f"rows put up to {upper:.2g} of their weight on later tokens" if upper > 1e-6 else ""
    for i, layer in enumerate(weights.layers):
        H, Tq, Tk = layer.shape
        if layer.causal or Tq == 1:
            continue
        later = torch.ones(Tq, Tk, dtype=torch.bool, device=layer.q.device).triu(1 + Tk - Tq)  # (Tq, Tk)
        m = layer.mask
        seen = m is None or bool((m[:, later] if m.dtype == torch.bool else m[:, later] > -1e3).any())
        if seen:
            return f"layer {i}'s mask lets queries see later tokens"
    return ""


def _dense(attentions, model_type: str, n_layers: int, T: tuple[int, int]) -> DenseWeights:
    """Eager attention's own weights, one tensor per layer, as a dense (L, H, Tq, Tk) source."""
    got = [a for a in attentions or () if a is not None]
    if not got:
        raise ValueError(refusal(model_type, "it does not return attention weights (its layers mix tokens "
                                             "another way: recurrence, state spaces or Fourier transforms)"))
    if len(got) < n_layers:
        raise ValueError(refusal(model_type, f"only {len(got)} of its {n_layers} layers return attention weights "
                                             "(the others mix tokens another way, or pool them)"))
    if len(got) > n_layers:
        raise ValueError(refusal(model_type, f"it returns {len(got)} attention maps for its {n_layers} layers "
                                             "(more than one attention per layer)"))
    if not all(isinstance(a, torch.Tensor) for a in got):  # PEGASUS-X: {"local": …, "global": …} per layer
        raise ValueError(refusal(model_type, "its eager attention returns each layer's weights in parts (local "
                                             "blocks and global tokens), not one weight per query and key"))
    if any(a.dim() != 4 or tuple(a.shape[-2:]) != T or a.shape != got[0].shape for a in got):
        shape = "×".join(map(str, got[0].shape[1:]))
        raise ValueError(refusal(model_type, f"its eager attention returns weights in a layout of its own ({shape} "
                                             f"per layer for {T[0]} queries and {T[1]} keys: local blocks, "
                                             "buckets or streams), not one weight per query and key"))
    return DenseWeights(stacked(got))


class _Steps:
    """A streamer for transformers' ``generate``: ``on_step(done, most)`` for each new token (its first ``put`` is
    the prompt)."""

    def __init__(self, on_step, most: int):
        self.on_step, self.most, self.done = on_step, most, -1

    def put(self, value) -> None:
        self.done += 1
        if self.done:
            self.on_step(self.done, self.most)

    def end(self) -> None:
        pass


class HFModel(TorchBackend):
    """A pretrained Hugging Face model; ``trace`` runs it on one text (and a target for encoder–decoders)."""

    def __init__(self, key: str, net, tokenizer, kind: str, config, source: str = ""):
        self.key, self.net, self.tokenizer, self.kind = key, net, tokenizer, kind
        self.abilities = frozenset({"positions"} | ({"token_ids", "ablation", "scorer"} if kind != "encoder-decoder"
                                                   else set()) | ({"generate", "outputs"} if kind == "decoder" else set())
                                   | ({"chat"} if kind == "decoder" and has_chat_template(tokenizer) else set()))
        self.model_type = config.model_type
        self.device = next(net.parameters()).device
        limits = [_position_limit(config)]
        if tokenizer.model_max_length < 1e6:  # larger values are "no limit" placeholders
            limits.append(int(tokenizer.model_max_length))
        self.position_limit = min((n for n in limits if n), default=None)
        self.lock = threading.RLock()  # held over tokenizing and the recorded forward (``recorded`` takes it again)
        self.start_id = _decoder_start(net, tokenizer) if kind == "encoder-decoder" else None
        self.capture = "interface"
        checked = self._checked_trace()
        if self.capture == "eager" or any(layer.bias is not None or layer.mask is not None
                                          for s in stacks(checked).values() for layer in s.weights.layers):
            self.position_limit = min(n for n in (self.position_limit, QUADRATIC_MAX_TOKENS) if n)
        first = checked.encoder if kind == "encoder-decoder" else checked
        self.n_layers, self.n_heads = first.n_layers, first.n_heads
        self.description = (
            f"{self.model_type} from {key.removeprefix('hf:')}: {self.n_layers} layers × {self.n_heads} heads, "
            f"{kind}, up to {self.max_tokens:,} tokens{source}"
        )

    def _checked_trace(self):
        """The check text's trace, captured when the captured weights equal eager attention's there; otherwise
        (the model's maths is not what the recipe reproduces, the capture failed, or the model never calls the
        interface) it runs eager from now on. The reference is eager with transformers' own eager masks."""
        target = CHECK_TEXT if self.kind == "encoder-decoder" else None
        captured, reason = None, "its attention modules do not call transformers' attention interface"
        if self.capture == "interface":
            try:
                captured = self.trace(CHECK_TEXT, target)
            except Exception as e:  # an argument the recipe does not know (attention sinks …), no attention calls
                reason = f"capture failed ({_cause(e)})"
            self._use("eager")
        try:
            eager = self.trace(CHECK_TEXT, target)
        except Exception as e:
            if isinstance(e, ValueError) and str(e).startswith("attnviz cannot"):
                raise
            raise ValueError(refusal(self.model_type, f"its forward fails on a plain text ({_cause(e)})")) from None
        if captured is not None:
            gap = check_gap(captured, eager)
            if gap <= TOLERANCE[self.net.dtype]:
                self._use("interface")
                return captured
            reason = f"captured weights are {gap:.2g} from eager attention's"
        log.warning("%s: %s; using eager attention", self.key, reason)
        return eager

    def _use(self, capture: str) -> None:
        """Switch the model's attention implementation, and check that every part of it really switched."""
        from transformers import PreTrainedModel

        want = hf_attention.NAME if capture == "interface" else "eager"
        self.net.set_attn_implementation(want)
        runs = {m.config._attn_implementation for m in self.net.modules() if isinstance(m, PreTrainedModel)}
        if runs != {want}:
            raise ValueError(refusal(self.model_type, f"it cannot switch its attention to {want} after loading "
                                                      f"(it still runs {', '.join(sorted(map(str, runs - {want})))})"))
        self.capture = capture

    def _forward(self, logits_from: int | None = None, **ids):
        """One recorded forward pass over batch-of-one token ids -> (outputs with every hidden state, ``Recorded``).

        A causal LM runs its base model without a cache: its logits (T × vocabulary floats, 500 MB at 4,096
        tokens for a 30k vocabulary) and its key/value cache are nothing a trace shows. ``logits_from``: run
        the whole LM and keep the logits of positions ``logits_from`` onwards (generation's next-token rows).
        """
        inputs = {k: torch.tensor([v], device=self.device) for k, v in ids.items()}  # (1, T)
        # A cache changes nothing a trace shows, but FSMT, asked for one, drops its decoder's causal mask.
        net, extra = (self.net.base_model, {"use_cache": False}) if self.kind == "decoder" else (self.net, {})
        if self.kind == "encoder-decoder":
            extra["use_cache"] = False
        if logits_from is not None:
            net = self.net
            if "logits_to_keep" in inspect.signature(net.forward).parameters:
                extra["logits_to_keep"] = inputs["input_ids"].shape[1] - logits_from
        with self.recorded() as run, _before_projection(self.net) as last:
            out = net(**inputs, **extra, output_attentions=self.capture == "eager", output_hidden_states=True)
        hidden = out.get("hidden_states")
        if hidden and last and hidden[-1].shape[-1] != hidden[0].shape[-1]:
            out["hidden_states"] = (*hidden[:-1], last[0])  # the residual stream, not its projection
        return out, run

    def _stack_weights(self, run, attentions, side: str, n_layers: int, T: tuple[int, int]):
        """One side's weights (``T``: its queries and keys): captured queries and keys, or eager attention's own."""
        if self.capture == "interface":
            return run.recorder.weights(side)
        return _dense(attentions, self.model_type, n_layers, T)

    def _chat(self, chat: bool) -> bool:
        if chat and not self.can("chat"):
            raise ValueError(f"{self.key} has no chat template (only causal LMs whose tokenizer brings one do): "
                             "trace the text as it is.")
        return chat

    def trace(self, text: str, target: str | None = None, max_tokens: int | None = None, chat: bool = False):
        """``chat``: ``text`` as the user's turn of the tokenizer's chat template (the template's tokens special)."""
        text = check_text(text)
        limit = self.limit(max_tokens)
        target = None if target is None or self.kind != "encoder-decoder" else check_text(target)
        chat = self._chat(chat)
        # The lock covers tokenizing too: a fast tokenizer shared by threads can fail with "Already borrowed".
        with self.lock, torch.inference_mode():
            src = encode(self.tokenizer, text, limit, chat)
            if self.kind != "encoder-decoder":
                out, run = self._forward(input_ids=src.ids)
                hidden, attentions = list(out.hidden_states), out.get("attentions")
                del out  # the list holds the only references: stacking lets each layer go once copied
                weights = self._stack_weights(run, attentions, "", len(hidden) - 1, (len(src.ids), len(src.ids)))
                return self._side(run, src, src.text or text, weights, hidden, self.kind)
            if target is None:
                tgt = self._label(self._generate(src.ids))
            else:
                enc = encode(self.tokenizer, target, limit - 1)
                tgt = enc._replace(
                    ids=[self.start_id, *enc.ids],
                    tokens=(self.tokenizer.convert_ids_to_tokens(self.start_id), *enc.tokens),
                    special=np.concatenate([[True], enc.special]),
                    word_ids=np.concatenate([[-1], enc.word_ids]),
                )
            out, run = self._forward(input_ids=src.ids, decoder_input_ids=tgt.ids)
            n_enc, n_dec = len(out.encoder_hidden_states) - 1, len(out.decoder_hidden_states) - 1
            Ts, Tt = len(src.ids), len(tgt.ids)
            enc_w = self._stack_weights(run, out.get("encoder_attentions"), "encoder", n_enc, (Ts, Ts))
            dec_w = self._stack_weights(run, out.get("decoder_attentions"), "decoder", n_dec, (Tt, Tt))
            cross = self._stack_weights(run, out.get("cross_attentions"), "cross", n_dec, (Tt, Ts))
        target_text = target or self.tokenizer.decode(tgt.ids, skip_special_tokens=True)
        return Seq2SeqTrace(
            encoder=self._side(run, src, text, enc_w, out.encoder_hidden_states, "encoder", "encoder"),
            decoder=self._side(run, tgt, target_text, dec_w, out.decoder_hidden_states, "decoder", "decoder"),
            cross=cross,
            generated=target is None,
        )

    def ablation(self, text: str, max_tokens: int | None = None):
        """("encoder", run) -> last hidden states (T, D), or ("lm", run) -> the mean next-token loss."""
        if self.kind == "encoder-decoder":
            raise ValueError(ENCODER_DECODER_ABLATION)
        with self.lock:  # tokenizers are not thread-safe
            ids = encode(self.tokenizer, check_text(text), self.limit(max_tokens)).ids
        ids = torch.tensor([ids], device=self.device)  # (1, T)
        if self.kind == "encoder":
            return "encoder", self.masked_run(lambda: self.net(input_ids=ids).last_hidden_state[0])  # (T, D)
        if ids.shape[1] < 2:
            raise ValueError("The next-token loss needs at least two tokens: enter a longer text.")
        loss = lambda: F.cross_entropy(self.net(input_ids=ids).logits[0, :-1].double(), ids[0, 1:])  # noqa: E731
        return "lm", self.masked_run(loss)  # predicts token t + 1 from t

    def scorer(self, text: str, target: str | None = None, max_tokens: int | None = None,
               chat: bool = False) -> Scorer:
        """A causal LM's next token (predicted, or ``target``: one token) as log-odds; an encoder's [CLS] norm."""
        if self.kind == "encoder-decoder":
            raise ValueError("Faithfulness explains one stack's prediction: encoder–decoder models are not supported.")
        chat = self._chat(chat)
        with self.lock:
            enc = encode(self.tokenizer, check_text(text), self.limit(max_tokens), chat)
            wanted = None if target is None else self.tokenizer(target, add_special_tokens=False)["input_ids"]
        table, net = self.net.get_input_embeddings(), self.net
        if self.kind == "encoder":
            if target is not None:
                raise ValueError("An encoder has no labels or next tokens to choose: its [CLS] output norm is explained.")
            return self.scoring(enc.ids, table, lambda x: net(input_ids=x).last_hidden_state[:, 0].norm(dim=-1),
                                target=f"‖{enc.tokens[0]} output‖", probability=False, position=0)
        if wanted is not None and len(wanted) != 1:
            raise ValueError(f"{target!r} is {len(wanted)} tokens for this tokenizer: choose a single next token.")
        if wanted is None:
            with self.lock, torch.inference_mode():
                wanted = [int(net(input_ids=torch.tensor([enc.ids], device=self.device)).logits[0, -1].argmax())]
        t = wanted[0]
        name = self.tokenizer.convert_ids_to_tokens(t)
        return self.scoring(enc.ids, table, lambda x: log_odds(net(input_ids=x, use_cache=False).logits[:, -1], t),
                            target=f"log-odds of the next token {name!r}", probability=True, position=len(enc.ids) - 1)

    def plain_ids(self) -> list[int]:
        """Every token id that is not a special token (what a probe of random tokens draws from)."""
        return ordinary_ids(self.tokenizer, self.net.get_input_embeddings().num_embeddings)

    def trace_ids(self, ids: list, add_special_tokens: bool = True) -> AttentionTrace:
        """The trace of token ids as given (``add_special_tokens``: wrapped as the tokenizer wraps a text)."""
        if self.kind == "encoder-decoder":
            raise ValueError("Token ids are traced for encoders and causal LMs; an encoder–decoder needs a text.")
        if add_special_tokens:
            ids = wrapped(self.tokenizer, list(ids))
        if not 0 < len(ids) <= self.max_tokens:
            raise ValueError(f"{len(ids)} tokens: this model takes 1 to {self.max_tokens:,}.")
        with self.lock, torch.inference_mode():  # the lock covers the tokenizer too
            out, run = self._forward(input_ids=list(ids))
            return self._ids_trace(list(ids), out, run)

    def _ids_trace(self, ids: list, out, run, special=None) -> AttentionTrace:
        """The trace of ``ids`` (``special``: the mask of its first tokens, a chat template's included)."""
        tok = self.tokenizer
        mask = np.array(tok.get_special_tokens_mask(ids, already_has_special_tokens=True), dtype=bool)
        if special is not None:
            mask[:len(special)] |= special
        enc = Encoded(ids, tuple(tok.convert_ids_to_tokens(ids)), mask, None, 0)
        weights = self._stack_weights(run, out.get("attentions"), "", len(out.hidden_states) - 1, (len(ids), len(ids)))
        return self._side(run, enc, tok.decode(ids), weights, out.hidden_states, self.kind)

    def run_with_trace(self, text, chat: bool = False) -> tuple[AttentionTrace, torch.Tensor]:
        """(trace, next-token logits (T, V)) of a causal LM's text (``chat``: in its chat template), or of token ids
        (a list, wrapped as ``trace_ids`` wraps them), in one forward."""
        if self.kind != "decoder":
            raise ValueError(f"Next-token logits need a causal language model; {self.key} is an {self.kind}.")
        chat, special = self._chat(chat), None
        with self.lock, torch.inference_mode():  # the lock covers the tokenizer too
            if isinstance(text, str):
                enc = encode(self.tokenizer, check_text(text), self.limit(), chat)
                ids, special = enc.ids, enc.special
            else:
                ids = wrapped(self.tokenizer, list(text))
            if not 0 < len(ids) <= self.max_tokens:
                raise ValueError(f"{len(ids)} tokens: this model takes 1 to {self.max_tokens:,}.")
            out, run = self._forward(0, input_ids=ids)
            return self._ids_trace(ids, out, run, special), out.logits[0].float().cpu()

    def generate(self, prompt: str, sampling: Sampling | None = None, on_step=None, chat: bool = False) -> Generation:
        """Continue ``prompt`` (``chat``: the user's turn of the chat template, so the model answers it) with the
        model's own ``generate`` (KV cache), then trace prompt + continuation in one forward, whose logits give each
        step's top-5 next tokens. ``on_step(done, most)`` after each new token; an exception it raises stops the
        generation there."""
        if self.kind != "decoder":
            raise ValueError(f"Generation needs a causal language model; {self.key} is an {self.kind}.")
        s = sampling or Sampling()
        prompt, chat = check_text(prompt), self._chat(chat)
        with self.lock, torch.inference_mode():
            enc = encode(self.tokenizer, prompt, self.max_tokens, chat)
            ids = enc.ids
            room = self.max_tokens - len(ids)
            if room < 1:
                raise ValueError(f"The prompt fills all {self.max_tokens:,} positions: shorten it to leave room.")
            inputs = torch.tensor([ids], device=self.device)  # (1, T)
            eos = self.tokenizer.eos_token_id
            options = dict(do_sample=False) if s.greedy else dict(do_sample=True, temperature=s.temperature,
                                                                 top_k=s.top_k or None, top_p=None)
            most = min(s.max_new_tokens, room)
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                torch.manual_seed(s.seed)
                full = self.net.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=most,
                                         num_beams=1, pad_token_id=eos if eos is not None else 0,
                                         streamer=None if on_step is None else _Steps(on_step, most),
                                         **options)[0].tolist()
            out, run = self._forward(len(ids) - 1, input_ids=full)
            logits = out.logits[0, -(len(full) - len(ids) + 1):-1]  # (new, V): the rows predicting each new token
            top_ids, top_probs = top_next(logits.float().cpu())
            trace = self._ids_trace(full, out, run, enc.special)
            tokens = tuple(tuple(self.tokenizer.convert_ids_to_tokens(row.tolist())) for row in top_ids)
            continuation = self.tokenizer.decode(full[len(ids):], skip_special_tokens=True)
        return Generation(trace, len(ids), continuation, top_ids, tokens, top_probs, s)

    def _side(self, run, enc, text: str, weights, hidden, kind: str, side: str = "") -> AttentionTrace:
        """One stack's trace (``side``: its name in the recorder); a causal stack whose weights reach later tokens is
        refused, never shown."""
        shapes = {tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__ for h in hidden}
        if len(shapes) != 1 or not all(isinstance(h, tuple) and h[:2] == (1, len(enc.ids)) for h in shapes):
            got = ", ".join(sorted(map(str, shapes)))
            raise ValueError(refusal(self.model_type, f"its hidden states are not one tokens × width array per "
                                                      f"layer (it returns {got} for {len(enc.ids)} tokens)"))
        if kind == "decoder" and (leak := causal_leak(weights)):
            raise ValueError(refusal(self.model_type, f"it loads as a causal model, but its attention reaches later "
                                                      f"tokens ({leak})"))
        return run.trace(enc, text, kind, hidden, side, weights=weights)

    def _generate(self, ids: list) -> list:
        """The model's own greedy output for ``ids``, decoder start token first."""
        out = self.net.generate(
            torch.tensor([ids], device=self.device),  # (1, Ts)
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=self.device),
            decoder_start_token_id=self.start_id,
            max_new_tokens=min(settings.max_new_tokens(), self.max_tokens - 1),
            do_sample=False,
            num_beams=1,
            # transformers 5.24's cache breaks when decoder and encoder depths differ (T5 num_decoder_layers);
            # without it, at most a few dozen short steps are recomputed.
            use_cache=False,
        )
        return out[0].tolist()

    def _label(self, ids: list):
        """Tokens, special mask and word ids for generated ``ids``: words from re-encoding the decoded text."""
        tok = self.tokenizer
        special = np.array(tok.get_special_tokens_mask(ids, already_has_special_tokens=True), dtype=bool)
        special[0] = True  # the decoder start token is structure, not generated text
        words = np.where(special, -1, np.arange(len(ids)))
        plain = [i for i, s in zip(ids, special) if not s]
        again = tok(tok.decode(plain), add_special_tokens=False)
        if again["input_ids"] == plain:  # same pieces, so the tokenizer's word ids apply
            words[~special] = [-1 if w is None else w for w in again.word_ids()]
        tokens = tuple(tok.convert_ids_to_tokens(ids))
        return Encoded(ids, tokens, special, words, 0)


def check(name: str, text: str = CHECK_TEXT, target: str = CHECK_TARGET) -> Check:
    """Trace ``name`` as a user would and compare every head with the same weights loaded eager (``models --check``):
    its support-matrix row."""
    source = locate(name)
    try:
        family = (gguf.read(source).architecture if source.is_file() else
                  json.loads((source / "config.json").read_text(encoding="utf-8")).get("model_type", "?"))
    except (OSError, ValueError):
        family = "?"
    try:
        backend = load_hf(name)
        trace = backend.trace(text, target)
    except ValueError as e:
        return Check(family, "refused", None, "", str(e))
    return against_eager(backend, trace, source, family, text, target)
