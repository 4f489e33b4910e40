"""Any pretrained Hugging Face model as a backend: encoders, decoders and encoder–decoders, eager attention.

``load_hf(name)`` takes a local folder or a hub id, refuses what is unsafe (custom code, pickle checkpoints,
oversized weights) with a plain message, and returns an ``HFModel`` whose ``trace`` matches the builtin one.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import settings
from ..budget import check_budget
from ..trace import AttentionTrace, Seq2SeqTrace
from .common import Encoded, check_text, encode, handed_over, stacked
from .hooks import record

# What a model folder needs besides its weights.
META_FILES = ["*.json", "*.txt", "*.model", "*.tiktoken", "merges.txt", "vocab.*"]

# Families whose learned positions start after the padding index (RoBERTa's offset of pad_token_id + 1).
PAD_OFFSET_POSITIONS = {
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "data2vec-text",
    "xmod", "roberta-prelayernorm", "mpnet", "ibert",
}

# Tensors a checkpoint may lack without changing attention or hidden states.
HARMLESS_MISSING = ("pooler", "lm_head", "final_logits_bias")

PROBE_TEXT = "Hello world."

# One layer's attention weights above this size are written straight into the trace (12 heads: from 296 tokens).
SOFTMAX_INTO_BYTES = 4 * 2**20


def load_hf(name: str) -> "HFModel":
    """The Hugging Face model in folder ``name`` (or hub id ``name``), checked and ready to trace."""
    name = (name or "").strip()
    if not name:
        raise ValueError("Give a Hugging Face model id (hf:bert-base-uncased) or a local folder (hf:/path/to/folder).")
    folder = _locate(name)
    config, kind = _read_config(folder)
    check_budget(config, kind)  # from the config alone, before any weight is read
    weights, safe = _weights([p.name for p in folder.iterdir() if p.is_file()], f"the folder {folder}")
    _check_size(sum((folder / w).stat().st_size for w in weights), name)
    if safe:
        _check_safetensors(folder, weights)
    return HFModel(f"hf:{name}", _load_model(folder, kind, safe), _load_tokenizer(folder), kind, config)


def _locate(name: str) -> Path:
    """A local model folder for ``name``: the folder itself, or the hub snapshot after the safety checks."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{name!r} is a file; give the folder that holds config.json and the weights.")
        return path
    if name.startswith(("/", "~", ".")) or "\\" in name or name.count("/") > 1:
        raise ValueError(f"There is no folder {name!r}.")
    return _from_hub(name)


def _offline_message(name: str) -> str:
    return (
        f"Could not reach the Hugging Face hub for {name!r} (offline?). Download the model elsewhere and give "
        "its local folder, e.g. hf:/path/to/folder"
    )


def _from_hub(name: str) -> Path:
    """The cached snapshot of hub model ``name``, downloaded (safe weights only, size checked) if needed."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub import errors as hub
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except hub.HFValidationError:
        raise ValueError(f"{name!r} is neither a folder nor a Hugging Face model id like 'org/model'.") from None
    try:
        cached = Path(snapshot_download(name, local_files_only=True))
        # Loading only a tokenizer caches config.json too: a snapshot without weights is not the model.
        if (cached / "config.json").is_file() and [*cached.glob("model*.safetensors"), *cached.glob("*.bin")]:
            return cached
    except hub.LocalEntryNotFoundError:
        pass
    if settings.hub_offline():
        raise ValueError(_offline_message(name))
    try:
        info = HfApi().model_info(name, timeout=settings.hub_timeout(), files_metadata=True)
    except hub.RepositoryNotFoundError:
        raise ValueError(f"There is no model {name!r} on the Hugging Face hub (or it is private).") from None
    except hub.GatedRepoError:
        raise ValueError(
            f"{name!r} is gated on the hub: accept its licence and log in, or download it and give its folder."
        ) from None
    except hub.HfHubHTTPError as e:
        raise ValueError(f"The Hugging Face hub refused {name!r}: {e}") from None
    except Exception:  # connection refused, DNS failure, timeout: all mean the hub is out of reach
        raise ValueError(_offline_message(name)) from None
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or []}
    weights, _ = _weights(sizes, f"the hub model {name!r}")
    _check_size(sum(sizes[w] for w in weights), name)
    try:
        return Path(snapshot_download(name, allow_patterns=META_FILES + weights, etag_timeout=settings.hub_timeout()))
    except Exception as e:
        raise ValueError(f"Downloading {name!r} from the Hugging Face hub failed: {e}") from None


def _read_config(folder: Path):
    """(config, kind) of the model in ``folder``; refuses folders that are not models or need custom code."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto as auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if not (folder / "config.json").is_file():
        raise ValueError(f"The folder {folder} has no config.json, so it is not a Hugging Face model folder.")
    for file in ("config.json", "tokenizer_config.json"):
        if not (folder / file).is_file():
            continue
        try:
            raw = json.loads((folder / file).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{file} in {folder} is not valid JSON: {e}") from None
        if isinstance(raw, dict) and "auto_map" in raw:
            raise ValueError(
                f"The model in {folder} needs its own Python code ({file} has an 'auto_map'); "
                "attnviz never runs code that comes with a model."
            )
    model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        raise ValueError(
            f"Model type {model_type!r} in {folder} is unknown to transformers: it needs custom code "
            "(which attnviz never runs) or a newer transformers."
        )
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    # BERT-like types have causal-LM heads too; a type with a masked-LM head is an encoder unless told otherwise.
    causal = model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if getattr(config, "is_encoder_decoder", False):
        return config, "encoder-decoder"
    return config, "decoder" if getattr(config, "is_decoder", False) or (causal and not masked) else "encoder"


def _weights(files, where: str) -> tuple[list[str], bool]:
    """(weight files, are they safetensors) among ``files``; pickle only with ATTNVIZ_ALLOW_PICKLE=1."""
    top = [f for f in files if "/" not in f and f.startswith("model")]
    safe = sorted(f for f in top if f.endswith(".safetensors"))
    if safe:
        return safe, True
    pickled = sorted(f for f in files if "/" not in f and f.startswith("pytorch_model") and f.endswith(".bin"))
    if pickled and settings.allow_pickle():
        return pickled, False
    if pickled:
        raise ValueError(
            f"{where} has only a pickle checkpoint ({pickled[0]}), which can run code when loaded. Convert it to "
            "safetensors, or set ATTNVIZ_ALLOW_PICKLE=1 if you trust where it came from."
        )
    raise ValueError(f"{where} has no model weights (model.safetensors).")


def _check_size(nbytes: int, name: str) -> None:
    limit = settings.max_model_mb()
    if nbytes > limit * 2**20:
        raise ValueError(
            f"The weights of {name!r} are {nbytes / 2**20:,.0f} MB, over the limit of {limit:,.0f} MB "
            "(raise it with ATTNVIZ_MAX_MODEL_MB)."
        )


def _check_safetensors(folder: Path, weights: list[str]) -> None:
    """Read each file's header, so a damaged file gets a plain message rather than a loader traceback."""
    from safetensors import SafetensorError, safe_open

    for w in weights:
        try:
            with safe_open(folder / w, "pt"):
                pass
        except (SafetensorError, OSError) as e:
            raise ValueError(f"The weights file {folder / w} is damaged (truncated or not safetensors): {e}") from None


def _load_model(folder: Path, kind: str, safe: bool):
    """The model with eager attention (the only implementation that returns weights), in eval mode."""
    import transformers as tf

    auto = {"encoder": tf.AutoModel, "decoder": tf.AutoModelForCausalLM, "encoder-decoder": tf.AutoModelForSeq2SeqLM}
    try:
        net, info = auto[kind].from_pretrained(
            folder,
            attn_implementation="eager",
            use_safetensors=safe,
            dtype=torch.float32,
            trust_remote_code=False,
            output_loading_info=True,
        )
    except Exception as e:  # the loaders raise many types for one cause: these weights cannot be used
        raise ValueError(f"Could not load the model in {folder}: {e}") from None
    missing = sorted(k for k in info["missing_keys"] if not any(h in k for h in HARMLESS_MISSING))
    if missing or info["mismatched_keys"]:
        bad = missing or sorted(str(k) for k in info["mismatched_keys"])
        raise ValueError(
            f"The weights in {folder} do not fit its config: {len(bad)} tensors missing or misshapen "
            f"(e.g. {', '.join(bad[:3])}); the model would run on random weights."
        )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return net.to(device).eval()


def _load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
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


def _stack(attentions, hidden, model_type: str, into: _SoftmaxInto | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(attentions (L, H, Tq, Tk), hidden states (L+1, T, D)) as float32 numpy, checked one per layer."""
    if not attentions or not hidden or len(attentions) != len(hidden) - 1 or any(a is None for a in attentions):
        raise ValueError(f"This model type ({model_type}) does not return attention weights; attnviz cannot show it.")
    attn = into.adopted(attentions) if into is not None else None
    return stacked(attentions) if attn is None else attn, stacked(hidden)  # (L, H, Tq, Tk), (L+1, T, D)


class _SoftmaxInto(TorchFunctionMode):
    """Inside this mode the i-th softmax over a float32 tensor shaped like ``buffer[i]`` (1, H, T, T), taken
    over its last dimension, writes its result into ``buffer[i]``; every other call runs unchanged.

    Eager attention returns its softmax as the layer's weights, so the model hands back slices of one
    (L, 1, H, T, T) buffer, which the trace adopts instead of copying 75 MB (at 512 tokens) out of L
    tensors. The numbers are the same softmax's. ``adopted`` trusts the buffer only if every returned
    weight tensor is its slice; a model that upcasts, rescales or returns something else gets the copy.
    """

    SOFTMAX = {F.softmax, torch.softmax, torch.Tensor.softmax}

    def __init__(self, buffer: torch.Tensor):
        super().__init__()
        self.buffer, self.filled = buffer, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.SOFTMAX and self.filled < len(self.buffer):
            x, dim, slot = args[0], args[1] if len(args) > 1 else kwargs.get("dim"), self.buffer[self.filled]
            if x.shape == slot.shape and x.dtype == slot.dtype and dim in (-1, x.ndim - 1) and len(args) <= 2 \
                    and kwargs.get("dtype") in (None, x.dtype):  # (a dtype given by position: left alone)
                self.filled += 1
                return torch.softmax(x, -1, out=slot)
        return func(*args, **kwargs)

    def adopted(self, attentions) -> np.ndarray | None:
        """The buffer as a read-only (L, H, T, T) array if ``attentions`` are exactly its slices, else None."""
        slots = self.buffer[:, 0]  # (L, H, T, T)
        if len(attentions) != len(slots) or any(
            a.data_ptr() != s.data_ptr() or a.shape[1:] != s.shape or a.stride()[1:] != s.stride()
            for a, s in zip(attentions, slots)
        ):
            return None
        return handed_over(slots)


class HFModel:
    """A pretrained Hugging Face model; ``trace`` runs it on one text (and a target for encoder–decoders)."""

    def __init__(self, key: str, net, tokenizer, kind: str, config):
        self.key, self.net, self.tokenizer, self.kind = key, net, tokenizer, kind
        self.model_type = config.model_type
        self.device = next(net.parameters()).device
        limits = [settings.max_tokens(), _position_limit(config)]
        if tokenizer.model_max_length < 1e6:  # larger values are "no limit" placeholders
            limits.append(int(tokenizer.model_max_length))
        self.max_tokens = min(n for n in limits if n)
        self.lock = threading.Lock()
        self.start_id = _decoder_start(net, tokenizer) if kind == "encoder-decoder" else None
        probe = self.trace(PROBE_TEXT, target=PROBE_TEXT if kind == "encoder-decoder" else None)
        first = probe.encoder if kind == "encoder-decoder" else probe
        self.n_layers, self.n_heads = first.n_layers, first.n_heads
        self.description = (
            f"{self.model_type} from {key.removeprefix('hf:')}: {self.n_layers} layers × {self.n_heads} heads, "
            f"{kind}, up to {self.max_tokens} tokens"
        )

    def _softmax_into(self, T: int) -> _SoftmaxInto | None:
        """A mode that collects a float32 CPU model's attention weights in one buffer, once the probe in
        ``__init__`` has told the layers and heads, and only where it pays: the mode costs a few µs on
        every torch call, while the copy it saves grows with T² (MiniLM: break-even near 256 tokens,
        15 ms saved at 512)."""
        if not hasattr(self, "n_heads") or self.device.type != "cpu" or self.net.dtype != torch.float32:
            return None
        if self.n_heads * T * T * 4 < SOFTMAX_INTO_BYTES:
            return None
        return _SoftmaxInto(torch.empty(self.n_layers, 1, self.n_heads, T, T))  # (L, 1, H, T, T)

    def _forward(self, **ids):
        """One forward pass over batch-of-one token ids -> (outputs with every layer's attentions and hidden
        states, the hooks' Recorder of norm statistics)."""
        inputs = {k: torch.tensor([v], device=self.device) for k, v in ids.items()}  # (1, T)
        with record(self.net) as rec:
            out = self.net(**inputs, output_attentions=True, output_hidden_states=True)
        return out, rec

    def trace(self, text: str, target: str | None = None) -> AttentionTrace | Seq2SeqTrace:
        text = check_text(text)
        target = None if target is None or self.kind != "encoder-decoder" else check_text(target)
        # The lock covers tokenizing too: a fast tokenizer shared by threads can fail with "Already borrowed".
        with self.lock, torch.inference_mode():
            src = encode(self.tokenizer, text, self.max_tokens)
            if self.kind != "encoder-decoder":
                into = self._softmax_into(len(src.ids))
                with into or contextlib.nullcontext():
                    out, rec = self._forward(input_ids=src.ids)
                attn, hidden = _stack(out.attentions, out.hidden_states, self.model_type, into)
                return self._side(src, text, attn, hidden, self.kind, rec.norms())
            if target is None:
                tgt = self._label(self._generate(src.ids))
            else:
                enc = encode(self.tokenizer, target, self.max_tokens - 1)
                tgt = enc._replace(
                    ids=[self.start_id, *enc.ids],
                    tokens=(self.tokenizer.convert_ids_to_tokens(self.start_id), *enc.tokens),
                    special=np.concatenate([[True], enc.special]),
                    word_ids=np.concatenate([[-1], enc.word_ids]),
                )
            out, rec = self._forward(input_ids=src.ids, decoder_input_ids=tgt.ids)
        enc_attn, enc_hidden = _stack(out.encoder_attentions, out.encoder_hidden_states, self.model_type)
        dec_attn, dec_hidden = _stack(out.decoder_attentions, out.decoder_hidden_states, self.model_type)
        cross, _ = _stack(out.cross_attentions, out.decoder_hidden_states, self.model_type)
        target_text = target or self.tokenizer.decode(tgt.ids, skip_special_tokens=True)
        return Seq2SeqTrace(
            encoder=self._side(src, text, enc_attn, enc_hidden, "encoder", rec.norms("encoder")),
            decoder=self._side(tgt, target_text, dec_attn, dec_hidden, "decoder", rec.norms("decoder")),
            cross_attentions=cross,
            generated=target is None,
        )

    def _side(self, enc, text: str, attn, hidden, kind: str, norms: dict) -> AttentionTrace:
        return AttentionTrace(
            tokens=enc.tokens,
            attentions=attn,
            hidden_states=hidden,
            norms=norms,
            special=enc.special,
            word_ids=enc.word_ids,
            model=self.key,
            kind=kind,
            text=text,
            truncated=enc.truncated,
        )

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
