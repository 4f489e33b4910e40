"""Every text model type transformers knows, as a tiny random model: the support matrix's inputs.

``text_types()`` walks transformers' own auto mappings (a base model, a causal LM or a seq2seq LM), leaving out
vision, audio and multimodal types (``skipped_types()`` says why each was left out). ``shrink(model_type)`` makes
any such config tiny — 2 layers, 4 heads, width 64 — while keeping what makes the family's attention its own
(windows, ALiBi, soft-caps, shared layers, relative bias, projections). ``build(model_type, folder)`` saves a tiny
model with spread-out random weights and MiniLM's tokenizer, the way a user's folder looks.
"""

from __future__ import annotations

from pathlib import Path

import torch

# Mappings whose types take pixels, sound, video, tables or time series: not a text model.
NON_TEXT = ("IMAGE", "VISION", "AUDIO", "CTC", "SPEECH", "VIDEO", "DEPTH", "OBJECT", "SEMANTIC", "INSTANCE",
            "UNIVERSAL", "KEYPOINT", "TIME_SERIES", "MASK_GENERATION", "BACKBONE", "SPECTROGRAM", "WAVEFORM",
            "FRAME", "XVECTOR", "MULTIMODAL", "DOCUMENT", "TABLE", "TEXT_RECOGNITION", "POSE", "POINTMAP",
            "NORMAL_ESTIMATION", "RNNT", "TDT", "VISUAL", "MATTING", "RETRIEVAL")
# Words in a type's name that mean its input is not text.
NON_TEXT_WORDS = ("vision", "audio", "asr", "speech", "video", "image", "codec", "tokenizer", "vit", "sam", "clip",
                  "ocr", "encodec", "mimi", "dac", "wav", "tts", "vq", "pe_", "diariz", "transcribe", "timestamp",
                  "patch", "vl_", "vl", "vbert")
# Text types that need more than text (layout boxes, entity spans, a pretrained second model) or are not models
# of a sequence of tokens (decision transformers, trajectories).
NOT_PLAIN_TEXT = {
    "bros": "needs layout boxes", "layoutlm": "needs layout boxes", "lilt": "needs layout boxes",
    "markuplm": "needs markup paths", "lxmert": "needs visual features", "visual_bert": "needs visual features",
    "luke": "needs entity spans", "canine": "reads characters, not the tokenizer's ids",
    "dpr": "a pair of encoders, not one model", "rag": "needs a retriever", "encoder-decoder": "a pair of models",
    "vision-text-dual-encoder": "a pair of models", "speech-encoder-decoder": "a pair of models",
    "blip_2_qformer": "queries image features", "clvp": "a speech model", "splinter": "needs question tokens",
    "decision_transformer": "models trajectories, not text",
    "xmod": "needs a language adapter chosen per text", "muse_glimmer_assistant": "needs noise and context inputs",
}
# Types whose names the rules above do not catch but whose input is not text.
NOT_TEXT_BY_NAME = ("autoformer", "informer", "time_series_transformer", "sam2_hiera_det_model", "radio", "seggpt",
                    "univnet", "wavtokenizer", "wavtokenizer_encoder", "voxtral_encoder", "voxtral_realtime_encoder",
                    "lasr_encoder", "parakeet_encoder", "glmasr_encoder", "mgp-str", "pixtral")
# Sub-configs that are parts of one text model's own layers (MPT's and DBRX's attention, ESM's folding head).
INTERNAL_SUBCONFIGS = {"attn_config", "ffn_config", "esmfold_config"}
TOKEN_IDS = dict(pad_token_id=0, bos_token_id=101, eos_token_id=102, sep_token_id=102, decoder_start_token_id=101,
                 cls_token_id=101, mask_token_id=103, unk_token_id=100)

LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers",
          "num_decoder_layers", "num_encoder_layers")
HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
         "decoder_attention_heads", "num_decoder_attention_heads")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num", "num_key_value_groups")
WIDTH = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "word_embed_proj_dim", "hidden_dim_model")
HEAD_DIM = ("head_dim", "d_kv", "d_head", "attention_head_size", "kv_channels", "qk_nope_head_dim",
            "qk_rope_head_dim", "v_head_dim", "qk_head_dim")
FFN = ("intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_inner",
       "ffn_hidden_size", "feed_forward_size", "moe_intermediate_size", "shared_expert_intermediate_size",
       "expert_intermediate_size", "hidden_dim")
POSITIONS = ("max_position_embeddings", "n_positions", "max_seq_len", "max_encoder_position_embeddings",
             "max_decoder_position_embeddings", "n_ctx", "seq_length", "max_sequence_length")
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K = ("num_experts_per_tok", "num_experts_per_token", "top_k", "moe_topk", "moe_k", "num_selected_experts")
# Linear-attention layers of hybrid models (Kimi, Bailing): their own heads, as many and as wide as attention's.
LINEAR_HEADS = ("linear_num_heads",)
LINEAR_HEAD_DIM = ("linear_head_dim",)
WINDOWS = ("sliding_window", "window_size", "local_window_size", "attention_window")
LORA = ("kv_lora_rank", "q_lora_rank")

SIZE = dict(layers=2, heads=4, kv_heads=2, width=64, head_dim=16, ffn=128, positions=256, window=8)
# Families whose features need their own values to stay what they are in the tiny model.
OVERRIDES = {
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], num_layers=2),
    "albert": dict(embedding_size=32, num_hidden_groups=1, inner_group_num=1),  # one layer module shared by all
    "funnel": dict(block_sizes=[1, 1], block_repeats=[1, 1], num_decoder_layers=1, d_head=16, n_head=4,
                   architectures=["FunnelModel"]),
    "mamba2": dict(num_heads=8, head_dim=16),
    "squeezebert": dict(embedding_size=64),
    "esmc": dict(num_key_value_heads=4),
    "zaya": dict(num_experts_per_tok=1),
    "opt": dict(word_embed_proj_dim=64),
    "led": dict(attention_window=[8, 8]),
    "longformer": dict(attention_window=[8, 8]),
    "big_bird": dict(attention_type="original_full"),
    "bigbird_pegasus": dict(attention_type="original_full"),
    "reformer": dict(attn_layers=["local", "lsh"], axial_pos_shape=[16, 16], axial_pos_embds_dim=[32, 32],
                     local_attn_chunk_length=8, lsh_attn_chunk_length=8, num_buckets=4),
    "xlnet": dict(mem_len=None),
    "bloom": dict(n_head=4),
    "deberta-v2": dict(relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=16),
    "deberta": dict(relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=16),
    "longt5": dict(local_radius=4, global_block_size=4),
    "switch_transformers": dict(num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, num_experts=4),
    # Multimodal rotary sections (time, height, width) that sum to half the rotary width of a 16-wide head.
    "glm4v_text": dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])),
    "glm4v_moe_text": dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                                mrope_section=[2, 1, 1])),
    "cosmos3_edge_text": dict(rope_parameters=dict(rope_type="default", rope_theta=1e8, mrope_section=[4, 2, 2])),
    "dbrx": dict(attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0),
                 ffn_config=dict(hidden_size=64, ffn_hidden_size=128, moe_num_experts=4, moe_top_k=2)),
    # North: sliding layers with rotary sections, full layers without positions (NoPE).
    "cohere_compass_text": dict(layer_types=["sliding_attention", "full_attention"], rope_parameters=dict(
        sliding_attention=dict(rope_type="default", rope_theta=10000.0, mrope_section=[4, 2, 2]), full_attention=None)),
    # Dory: an input, a looped recurrent and an output layer; sliding and full attention kept.
    "dory": dict(layer_types=["sliding_attention", "full_attention", "sliding_attention"], num_hidden_layers=3,
                 n_input_layers=1, n_recurrent_layers=1, n_output_layers=1),
    "qwen4_exp_text": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=4,
                           indexer_compress_ratio=2, hc_lowrank=8, ple_embed_dim=64, linear_key_head_dim=16,
                           linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4),
    # Gemma 4: its full-attention layers have wider heads (a per-layer config), kept at twice the sliding width.
    "gemma4_text": dict(global_head_dim=32),
    "gemma4_unified_text": dict(global_head_dim=32),
    "embedding_gemma2_text": dict(global_head_dim=32, embedding_dim=64),
    "glm5_next_text": dict(qk_rope_head_dim=0, qk_head_dim=16),  # its sparse (DSA) attention layers have no rotary part
    # Zamba: one shared attention block reused by every hybrid layer (so two of them), mamba layers between.
    "zamba": dict(layers_block_type=["linear_attention", "hybrid"] * 2, num_hidden_layers=4, attn_layer_period=2,
                  attn_layer_offset=1, attention_hidden_size=128, attention_head_dim=32, mamba_dt_rank=8),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
    # Gemma 3n: its last layers reuse the keys of the last earlier layer of their kind, alt-up and laurel kept.
    "gemma3n_text": dict(layer_types=["sliding_attention", "full_attention"] * 2, num_hidden_layers=4,
                         num_kv_shared_layers=2, intermediate_size=[128] * 4,
                         activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0], laurel_rank=8),
}
# Variants of a family whose shape differs from its default config (opt-350m's narrower embeddings, ALiBi Falcon).
VARIANTS = {
    "opt-350m": ("opt", dict(word_embed_proj_dim=32, do_layer_norm_before=False)),
    "falcon-alibi": ("falcon", dict(alibi=True)),
    "falcon-new": ("falcon", dict(new_decoder_architecture=True, num_kv_heads=2)),
    "mistral-window": ("mistral", dict(sliding_window=8)),
}
# T5-style models do not scale their logits: smaller weights (0.1) keep float32 eager itself exact.
UNSCALED = ("t5", "mt5", "umt5", "longt5", "switch_transformers", "pop2piano", "t5gemma", "udop")


def _mappings():
    from transformers.models.auto import modeling_auto as auto

    return auto


def candidate_types() -> list[str]:
    """Model types with a base model, a causal LM or a seq2seq LM class."""
    auto = _mappings()
    return sorted({*auto.MODEL_MAPPING_NAMES, *auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                   *auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES})


def non_text_reason(model_type: str) -> str | None:
    """Why ``model_type`` is not a plain text model, or None when it is one."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    auto = _mappings()
    for name in dir(auto):
        if name.endswith("_MAPPING_NAMES") and any(w in name for w in NON_TEXT) and model_type in getattr(auto, name):
            return f"not text ({name.removesuffix('_MAPPING_NAMES').lower()})"
    words = model_type.replace("-", "_").split("_")
    if any(w in NON_TEXT_WORDS for w in words) or any(
            w in model_type for w in ("vision", "audio", "speech", "video", "image")):
        return "not text (its name says it reads another input)"
    if model_type in NOT_TEXT_BY_NAME:
        return "not text (images, sound or time series)"
    if model_type in NOT_PLAIN_TEXT:
        return NOT_PLAIN_TEXT[model_type]
    try:
        config = CONFIG_MAPPING[model_type]
    except KeyError:
        return "no config class"
    if set(getattr(config, "sub_configs", None) or ()) - INTERNAL_SUBCONFIGS:
        return f"multimodal or composite (sub-configs: {', '.join(config.sub_configs)})"
    return None


def text_types() -> list[str]:
    """Every plain text model type of the auto mappings."""
    return [t for t in candidate_types() if non_text_reason(t) is None]


def skipped_types() -> dict[str, str]:
    """{model type: why the matrix leaves it out}."""
    return {t: r for t in candidate_types() if (r := non_text_reason(t))}


def _layer_types(values: list, n: int) -> list:
    """Per-layer types cut to ``n`` layers that keep every kind the full list has (sliding and full …)."""
    kinds = list(dict.fromkeys(values))
    return (kinds * n)[:max(n, len(kinds))]


def shrink(model_type: str, **extra):
    """A tiny config of ``model_type``: the same family's maths at 2 layers, 4 heads and width 64."""
    from transformers.integrations.heterogeneity.configuration_utils import AmbiguousGlobalPerLayerAttributeError
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    base_type, variant = VARIANTS.get(model_type, (model_type, {}))
    cls = CONFIG_MAPPING[base_type]
    default = cls().to_dict()
    s = SIZE
    want = {}
    for names, value in ((LAYERS, s["layers"]), (HEADS, s["heads"]), (KV_HEADS, s["kv_heads"]),
                         (WIDTH, s["width"]), (HEAD_DIM, s["head_dim"]), (FFN, s["ffn"]),
                         (POSITIONS, s["positions"]), (EXPERTS, 4), (TOP_K, 2), (LORA, 16), (WINDOWS, s["window"]),
                         (LINEAR_HEADS, s["heads"]), (LINEAR_HEAD_DIM, s["head_dim"])):
        for name in names:
            if isinstance(default.get(name), int) and not isinstance(default.get(name), bool):
                want[name] = value
    for name, value in (("num_key_value_heads", s["kv_heads"]), ("head_dim", s["head_dim"]),
                        *((e, 4) for e in EXPERTS), *((k, 2) for k in TOP_K)):
        if name in default and default[name] is None:
            want[name] = value
    if isinstance(default.get("rotary_dim"), int):
        want["rotary_dim"] = s["head_dim"] // 2
    if "kv_lora_rank" in default:  # multi-head latent attention: one key per query head, rotary part apart
        want.update(num_key_value_heads=s["heads"], qk_rope_head_dim=8, qk_nope_head_dim=16, qk_head_dim=24,
                    v_head_dim=16, head_dim=8)
    for name, ids in TOKEN_IDS.items():
        if name in default:
            want[name] = ids
    from tiny_models import tokenizer

    want["vocab_size"] = len(tokenizer("bert"))
    for name in ("unpadded_vocab_size", "vocab_size_per_layer_input"):
        if name in default:
            want[name] = want["vocab_size"]
    if "hidden_size_per_layer_input" in default:  # Gemma 3n/4's per-layer token embeddings
        want["hidden_size_per_layer_input"] = 16
    n = want.get("num_hidden_layers", s["layers"])
    for name in ("layer_types", "mlp_layer_types", "attention_layers", "block_types", "layers_block_type",
                 "hybrid_override_pattern"):
        if isinstance(default.get(name), list) and default[name]:
            kinds = _layer_types(default[name], n)
            want[name] = kinds
            for layers in LAYERS:
                if layers in want:
                    want[layers] = len(kinds)
    for name in ("n_group", "topk_group", "n_shared_experts", "first_k_dense_replace", "num_shared_experts",
                 "num_expert_group"):
        if isinstance(default.get(name), int) and default[name] > 1 or name in default and default[name] is None:
            want[name] = 1
    if "partial_rotary_factor" in default and default.get("partial_rotary_factor"):
        want["partial_rotary_factor"] = default["partial_rotary_factor"]
    want.update(OVERRIDES.get(base_type, {}))
    want.update(variant)
    want.update(extra)
    config = cls(**want)
    for name, value in want.items():  # a constructor that derives an attribute must not undo what is asked
        try:  # a per-layer attribute (heterogeneous configs) has no one global value to compare
            if name not in ("layer_types", *INTERNAL_SUBCONFIGS) and getattr(config, name, value) != value:
                setattr(config, name, value)
        except (AttributeError, ValueError, AmbiguousGlobalPerLayerAttributeError):
            pass
    return config


def spread(net: torch.nn.Module, model_type: str, half: bool = False) -> None:
    """Random weights with spread: at the default init every head is near uniform and a wrong mask hides.
    ``half``: for a bf16/fp16 checkpoint, whose eager attention rounds its logits to 8 bits (at 0.25 they reach
    tens, and eager's own rounding moves weights by 3e-2)."""
    std = 0.1 if model_type in UNSCALED or half else 0.25
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() >= 2:
                p.normal_(0, std)


def kind_class(model_type: str):
    """The auto class a folder of this type loads as (what attnviz picks): seq2seq, causal LM or base model."""
    import transformers as tf

    auto = _mappings()
    base = VARIANTS.get(model_type, (model_type,))[0]
    if base in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return tf.AutoModelForSeq2SeqLM
    if base in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and base not in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return tf.AutoModelForCausalLM
    return tf.AutoModel


def build(model_type: str, folder, dtype=torch.float32) -> Path:
    """Save a tiny ``model_type`` model (safetensors, ``dtype``) and MiniLM's tokenizer into ``folder``."""
    from tiny_models import tokenizer

    folder = Path(folder)
    config = shrink(model_type)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = kind_class(model_type).from_config(config)
        spread(net, model_type, half=dtype != torch.float32)
    net.to(dtype).save_pretrained(folder)
    tokenizer("bert").save_pretrained(folder)
    return folder


def outcome(model_type: str) -> dict:
    """The matrix row of ``model_type``: built tiny in a temporary folder, checked as ``models --check`` does."""
    import logging
    import tempfile
    import time

    from attnviz.backends.hf import check

    logging.getLogger("attnviz").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        try:
            build(model_type, folder)
        except Exception as e:  # the shrink helper could not make this family tiny: listed, not judged
            return dict(type=model_type, built=False, reason=f"{type(e).__name__}: {e}"[:300])
        try:
            c = check(folder)
        except Exception as e:
            return dict(type=model_type, built=True, path="error", reason=f"{type(e).__name__}: {e}"[:300])
        if c.path == "refused" and "forward fails" in c.reason and (own := _own_failure(model_type, folder)):
            return dict(type=model_type, built=False, reason=f"its own eager forward fails at this size: {own}"[:300])
    return dict(type=model_type, built=True, path=c.path, gap=c.gap, dtype=c.dtype, reason=c.reason,
                exact=c.exact, seconds=time.perf_counter() - start)


def _own_failure(model_type: str, folder) -> str:
    """Why the tiny model's own eager forward fails on a few tokens ("" when it runs): then the shrink is at fault."""
    try:
        net = kind_class(model_type).from_pretrained(folder, attn_implementation="eager").eval()
        ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102]])  # (1, T)
        extra = {"decoder_input_ids": ids} if net.config.is_encoder_decoder else {}
        with torch.inference_mode():
            net(input_ids=ids, **extra, output_attentions=True)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return ""


WORKER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import families
for line in sys.stdin:
    print(json.dumps(families.outcome(line.strip())), flush=True)
"""


def matrix(types: list[str], workers: int = 2, timeout: float = 180) -> list[dict]:
    """Every type's ``outcome`` from ``workers`` long-lived subprocesses (a family that kills its process, or
    hangs past ``timeout`` seconds, gets a row that says so and a fresh worker takes over)."""
    import json
    import os
    import selectors
    import subprocess
    import sys
    import time

    here = str(Path(__file__).parent)
    todo, rows, procs = list(types), {}, {}
    sel = selectors.DefaultSelector()

    def start():
        p = subprocess.Popen([sys.executable, "-c", WORKER, here], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        sel.register(p.stdout, selectors.EVENT_READ, p)
        return p

    def give(p):
        if todo:
            t = todo.pop(0)
            procs[p] = (t, time.monotonic())
            p.stdin.write(t + "\n")
            p.stdin.flush()
        else:
            procs.pop(p, None)
            sel.unregister(p.stdout)
            p.stdin.close()
            p.wait()

    for _ in range(min(workers, len(todo))):
        give(start())
    while procs:
        for key, _ in sel.select(timeout=5):
            p = key.data
            line = p.stdout.readline()
            t = procs[p][0]
            if line:
                rows[t] = json.loads(line)
                give(p)
            else:  # the worker died with this type
                rows[t] = dict(type=t, built=True, path="error", reason=f"the process died (exit {p.wait()})")
                sel.unregister(p.stdout)
                del procs[p]
                give(start())
        for p, (t, since) in list(procs.items()):
            if time.monotonic() - since > timeout:
                p.kill()
                p.wait()
                rows[t] = dict(type=t, built=True, path="error", reason=f"no answer in {timeout:.0f} s")
                sel.unregister(p.stdout)
                del procs[p]
                give(start())
    return [rows[t] for t in types]
