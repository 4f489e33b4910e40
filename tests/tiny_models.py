"""Tiny random Hugging Face models (2 layers, width 32, 4 heads) saved as safetensors with a tokenizer.

``build(family, folder) -> folder`` writes one; the session fixture ``tiny_model(family)`` builds each
family once per test run. Tokenizers are real: MiniLM's WordPiece for the BERT family, and byte-level BPE,
SentencePiece-style BPE and Unigram vocabularies trained here on a few sentences, so GPT-2 (Ġ),
Llama and T5 (▁) tokens look like the real thing.
"""

from __future__ import annotations

import json
import string
from functools import cache, lru_cache
from pathlib import Path

import pytest
import torch
import transformers as tf

from attnviz.backends.builtin import minilm_path

FAMILIES = ("bert", "roberta", "distilbert", "gpt2", "llama", "t5", "byt5", "bart", "marian", "encoder-decoder")
# Decoders whose attention has more to it: a sliding window (Mistral; Gemma 2 on alternate layers), soft-capped
# logits and a query scale that is not 1/√head_dim (Gemma 2), query/key biases (Qwen2).
WINDOWED = ("mistral", "gemma2", "qwen2")
NO_ATTENTION = ("fnet",)  # mixes tokens with a Fourier transform: no attention weights to show

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Attention is all you need, said the paper in 2017.",
    "Transformers read text as tokens; each layer mixes them with attention heads.",
    "A house, a tree and a river: the cat sat on the mat!",
    "Hello world. Where is the station? It is near the old bridge.",
    "A naïve café in Zürich serves crème brûlée 😀",
    string.printable,  # every ASCII character reaches the vocabulary, so nothing becomes <unk>
] * 3

SIZE = dict(hidden=32, layers=2, heads=4, ffn=64, positions=64)


@lru_cache(maxsize=None)
def _byte_bpe() -> tuple[dict, list]:
    """(vocab, merges) of a GPT-2-style byte-level BPE; ids 0–4 are <s> <pad> </s> <unk> <mask>."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"]
    bpe.train_from_iterator(CORPUS, vocab_size=1000, min_frequency=1, special_tokens=specials, show_progress=False)
    merges = json.loads(bpe._tokenizer.to_str())["model"]["merges"]
    return bpe.get_vocab(), [tuple(m) for m in merges]


@lru_cache(maxsize=None)
def _metaspace_bpe() -> tuple[dict, list]:
    """(vocab, merges) of a Llama-style BPE over ▁-marked words; ids 0–2 are <unk> <s> </s>."""
    from tokenizers import SentencePieceBPETokenizer

    bpe = SentencePieceBPETokenizer()
    bpe.train_from_iterator(
        CORPUS, vocab_size=300, min_frequency=1, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    merges = json.loads(bpe._tokenizer.to_str())["model"]["merges"]
    return bpe.get_vocab(), [tuple(m) for m in merges]


@lru_cache(maxsize=None)
def _unigram() -> list:
    """[(piece, score)] of a T5-style Unigram model; ids 0–2 are <pad> </s> <unk>."""
    from tokenizers import SentencePieceUnigramTokenizer

    uni = SentencePieceUnigramTokenizer()
    uni.train_from_iterator(
        CORPUS,
        vocab_size=250,
        special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>",
        initial_alphabet=list(string.printable.strip()),
        show_progress=False,
    )
    return [tuple(v) for v in json.loads(uni._tokenizer.to_str())["model"]["vocab"]]


def tokenizer(family: str):
    """The tokenizer each family is saved with."""
    if family in ("bert", "distilbert", "encoder-decoder", "fnet"):
        return tf.AutoTokenizer.from_pretrained(minilm_path())
    if family in ("roberta", "bart"):
        return tf.RobertaTokenizer(*_byte_bpe())
    if family == "gpt2":
        return tf.GPT2Tokenizer(*_byte_bpe())
    if family in ("llama", *WINDOWED):
        return tf.LlamaTokenizer(*_metaspace_bpe(), add_bos_token=True)
    if family in ("t5", "marian"):
        return tf.T5Tokenizer(vocab=_unigram(), extra_ids=0)
    if family == "byt5":
        return tf.ByT5Tokenizer()  # a Python tokenizer over UTF-8 bytes: no tokenizer.json, no word ids
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES + WINDOWED)}")


def model(family: str, vocab_size: int):
    """A randomly initialised model of ``family``, sized by SIZE."""
    d, n, h, f, p = SIZE["hidden"], SIZE["layers"], SIZE["heads"], SIZE["ffn"], SIZE["positions"]
    bert = dict(vocab_size=vocab_size, hidden_size=d, num_hidden_layers=n, num_attention_heads=h)
    bert.update(intermediate_size=f, max_position_embeddings=p)
    seq2seq = dict(vocab_size=vocab_size, d_model=d, encoder_layers=n, decoder_layers=n, max_position_embeddings=p)
    seq2seq.update(encoder_attention_heads=h, decoder_attention_heads=h, encoder_ffn_dim=f, decoder_ffn_dim=f)
    if family == "bert":
        return tf.BertModel(tf.BertConfig(**bert))
    if family == "roberta":
        # RoBERTa's positions start after pad_token_id + 1, so its table has two more rows than usable positions.
        return tf.RobertaModel(tf.RobertaConfig(**{**bert, "max_position_embeddings": p + 2}, pad_token_id=1))
    if family == "distilbert":
        config = tf.DistilBertConfig(vocab_size=vocab_size, dim=d, n_layers=n, n_heads=h, hidden_dim=f)
        config.max_position_embeddings = p
        return tf.DistilBertModel(config)
    if family == "fnet":
        config = tf.FNetConfig(vocab_size=vocab_size, hidden_size=d, num_hidden_layers=n, intermediate_size=f)
        return tf.FNetModel(config)
    if family == "gpt2":
        eot = 5  # <|endoftext|>
        config = tf.GPT2Config(vocab_size=vocab_size, n_embd=d, n_layer=n, n_head=h, n_positions=p, bos_token_id=eot)
        config.eos_token_id = eot
        return tf.GPT2LMHeadModel(config)
    if family == "llama":
        # Grouped-query attention: 4 query heads share 2 key/value heads.
        config = tf.LlamaConfig(vocab_size=vocab_size, hidden_size=d, intermediate_size=f, num_hidden_layers=n)
        config.update(dict(num_attention_heads=h, num_key_value_heads=2, max_position_embeddings=p))
        config.bos_token_id, config.eos_token_id = 1, 2
        return tf.LlamaForCausalLM(config)
    if family in WINDOWED:
        rope = dict(vocab_size=vocab_size, hidden_size=d, intermediate_size=f, num_hidden_layers=n,
                    num_attention_heads=h, num_key_value_heads=2, max_position_embeddings=p)
        if family == "mistral":
            config = tf.MistralConfig(**rope, sliding_window=5)
        elif family == "gemma2":
            config = tf.Gemma2Config(**rope, head_dim=d // h, sliding_window=5, query_pre_attn_scalar=5,
                                     attn_logit_softcapping=1.5, layer_types=["sliding_attention", "full_attention"])
        else:
            config = tf.Qwen2Config(**rope)
        config.bos_token_id, config.eos_token_id = 1, 2
        return tf.AutoModelForCausalLM.from_config(config)
    if family in ("t5", "byt5"):
        # T5: one more decoder layer than encoder layers, so nothing may assume the two stacks match.
        config = tf.T5Config(vocab_size=vocab_size, d_model=d, d_kv=d // h, d_ff=f, num_heads=h)
        config.update(dict(num_layers=n, num_decoder_layers=n + (family == "t5")))
        config.pad_token_id, config.eos_token_id, config.decoder_start_token_id = 0, 1, 0
        return tf.T5ForConditionalGeneration(config)
    if family == "bart":
        config = tf.BartConfig(**seq2seq, bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2)
        return tf.BartForConditionalGeneration(config)
    if family == "marian":
        config = tf.MarianConfig(**seq2seq, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
        return tf.MarianMTModel(config)
    if family == "encoder-decoder":
        enc = tf.BertConfig(**bert)
        dec = tf.BertConfig(**bert, is_decoder=True, add_cross_attention=True)
        config = tf.EncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 101, 0, 102  # [CLS] [PAD] [SEP]
        return tf.EncoderDecoderModel(config=config)
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES + WINDOWED + NO_ATTENTION)}")


def build(family: str, folder) -> Path:
    """Save a tiny ``family`` model (safetensors) and its tokenizer into ``folder``; return the folder."""
    folder = Path(folder)
    tok = tokenizer(family)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = model(family, len(tok))
    net.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """``tiny_model(family) -> folder``: each family built once per session."""
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build(family, tmp_path_factory.mktemp(f"tiny-{family}"))
        return built[family]

    return get


@pytest.fixture(scope="session")
def tiny_backend(tiny_model):
    """``tiny_backend(family)``: the attnviz backend of a tiny model, loaded once per session."""
    from attnviz.backends.hf import load_hf

    return cache(lambda family: load_hf(str(tiny_model(family))))


def long_llama(folder) -> str:
    """A tiny Llama in ``folder`` whose rotary positions go to 16,384 (TESTING.md's long-context decoder, no
    download), as the model key users give."""
    folder = build("llama", folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 16_384
    (folder / "config.json").write_text(json.dumps(config))
    return f"hf:{folder}"
