"""The Hugging Face backend: tiny random models of each family loaded the way a user types them, compared with
the models' own outputs; MiniLM against the built-in encoder; one test per refusal message."""

import json
import shutil
import socket
import threading
import time

import numpy as np
import pytest
import torch
import transformers as tf
from tiny_models import FAMILIES

import attnviz
from attnviz.backends import open_model
from attnviz.backends.builtin import minilm_path
from attnviz.backends.hf import load_hf
from attnviz.core.tokens import clean

TEXT = "The quick brown fox jumps over the lazy dog, and the dog sleeps."
TARGET = "A fox jumps."

# The model class each family's own outputs come from: the reference, independent of the Auto dispatch.
REFERENCE = {
    "bert": tf.BertModel,
    "roberta": tf.RobertaModel,
    "distilbert": tf.DistilBertModel,
    "gpt2": tf.GPT2LMHeadModel,
    "llama": tf.LlamaForCausalLM,
    "t5": tf.T5ForConditionalGeneration,
    "byt5": tf.T5ForConditionalGeneration,
    "bart": tf.BartForConditionalGeneration,
    "marian": tf.MarianMTModel,
    "encoder-decoder": tf.EncoderDecoderModel,
}
KIND = {"gpt2": "decoder", "llama": "decoder"}
KIND |= dict.fromkeys(["t5", "byt5", "bart", "marian", "encoder-decoder"], "encoder-decoder")


def reference(folder, family):
    return REFERENCE[family].from_pretrained(folder, attn_implementation="eager").eval()


def check_probabilities(attn, causal=False):
    """Rows sum to 1; a causal stack has an upper triangle of exact zeros."""
    np.testing.assert_allclose(attn.sum(-1), 1.0, atol=1e-5)
    if causal:
        assert not np.triu(attn, k=1).any()


def copy_model(tiny_model, family, dest):
    return shutil.copytree(tiny_model(family), dest)


@pytest.mark.parametrize("family", FAMILIES)
def test_trace_equals_the_models_own_outputs(tiny_model, family):
    folder = tiny_model(family)
    backend = attnviz.load(f"hf:{folder}")
    net, tok = reference(folder, family), tf.AutoTokenizer.from_pretrained(folder)
    kind = KIND.get(family, "encoder")
    assert (backend.key, backend.kind) == (f"hf:{folder}", kind)
    assert backend.n_heads == 4 and backend.n_layers == 2  # Llama: 4 query heads over 2 key/value heads

    ids = tok(TEXT).input_ids
    with torch.inference_mode():
        if kind != "encoder-decoder":
            trace = backend.trace(TEXT)
            out = net(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
            assert trace.tokens == tuple(tok.convert_ids_to_tokens(ids))
            assert trace.kind == kind
            np.testing.assert_allclose(trace.attentions, torch.cat(out.attentions).numpy(), atol=1e-5)
            np.testing.assert_allclose(trace.hidden_states, torch.cat(out.hidden_states).numpy(), atol=1e-5)
            check_probabilities(trace.attentions, causal=kind == "decoder")
            return

        trace = backend.trace(TEXT, target=TARGET)
        start = json.loads((folder / "config.json").read_text())["decoder_start_token_id"]
        target_ids = [start, *tok(TARGET).input_ids]
        decoder_ids = torch.tensor([target_ids])
        out = net(torch.tensor([ids]), decoder_input_ids=decoder_ids, output_attentions=True, output_hidden_states=True)
    assert trace.encoder.tokens == tuple(tok.convert_ids_to_tokens(ids))
    assert trace.decoder.tokens == tuple(tok.convert_ids_to_tokens(target_ids))
    assert (trace.encoder.kind, trace.decoder.kind, trace.generated) == ("encoder", "decoder", False)
    pairs = [
        (trace.encoder.attentions, out.encoder_attentions),
        (trace.decoder.attentions, out.decoder_attentions),
        (trace.cross_attentions, out.cross_attentions),
        (trace.encoder.hidden_states, out.encoder_hidden_states),
        (trace.decoder.hidden_states, out.decoder_hidden_states),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours, torch.cat(theirs).numpy(), atol=1e-5)
    check_probabilities(trace.encoder.attentions)
    check_probabilities(trace.decoder.attentions, causal=True)
    check_probabilities(trace.cross_attentions)
    if family == "t5":  # 2 encoder layers, 3 decoder layers
        assert trace.encoder.n_layers == 2 and trace.decoder.n_layers == trace.cross_attentions.shape[0] == 3


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_captured_through_the_attention_interface(tiny_backend, family):
    """No family silently falls back to eager attention: a transformers upgrade that breaks the capture
    turns this red, not just slower."""
    backend = tiny_backend(family)
    trace = backend.trace(TEXT, target=TARGET if KIND.get(family) == "encoder-decoder" else None)
    assert backend.capture == trace.capture == "interface"
    assert backend.net.config._attn_implementation == "attnviz"


@pytest.mark.parametrize("family", ["t5", "encoder-decoder"])
def test_without_a_target_the_decoder_side_is_the_models_greedy_output(tiny_model, family, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_NEW_TOKENS", "6")
    folder = tiny_model(family)
    backend = attnviz.load(f"hf:{folder}")
    net, tok = reference(folder, family), tf.AutoTokenizer.from_pretrained(folder)
    trace = backend.trace(TEXT)
    ids = torch.tensor([tok(TEXT).input_ids])
    with torch.inference_mode():
        greedy = net.generate(ids, max_new_tokens=6, do_sample=False, num_beams=1, use_cache=False)[0].tolist()
        out = net(ids, decoder_input_ids=torch.tensor([greedy]), output_attentions=True)
    assert trace.generated and trace.decoder.tokens == tuple(tok.convert_ids_to_tokens(greedy))
    assert len(greedy) <= 7 and trace.decoder.special[0]
    np.testing.assert_allclose(trace.cross_attentions, torch.cat(out.cross_attentions).numpy(), atol=1e-5)
    check_probabilities(trace.decoder.attentions, causal=True)


def test_a_bare_folder_is_the_same_model(tiny_model):
    folder = tiny_model("gpt2")
    bare, prefixed = attnviz.load(str(folder)), attnviz.load(f"hf:{folder}")
    assert bare.key == f"hf:{folder}"
    np.testing.assert_array_equal(bare.trace(TEXT).attentions, prefixed.trace(TEXT).attentions)


@pytest.mark.parametrize("words", [8, 400])  # 400 words: over 300 tokens, several tiles per head
def test_minilm_through_hf_matches_the_builtin_encoder_and_its_own_outputs(words):
    text = " ".join(TEXT.split() * (words // len(TEXT.split()) + 1))
    backend = attnviz.load(f"hf:{minilm_path()}")
    hf, ours = backend.trace(text), attnviz.trace(text, "builtin:minilm")
    assert hf.tokens == ours.tokens and (hf.n_tokens > 300) == (words > 8)
    np.testing.assert_allclose(hf.attentions, ours.attentions, atol=1e-4)
    np.testing.assert_allclose(hf.hidden_states, ours.hidden_states, atol=1e-4)
    eager = tf.AutoModel.from_pretrained(minilm_path(), attn_implementation="eager").eval()
    with torch.inference_mode():
        ids = torch.tensor([backend.tokenizer(text, truncation=True, max_length=512).input_ids])
        want = eager(ids, output_attentions=True).attentions  # the model's own weights, eager
    # Recomputed from queries and keys of an SDPA forward (whose earlier layers round differently from eager's):
    # within 1e-5, the tolerance every family is held to.
    np.testing.assert_allclose(hf.attentions, torch.cat(want).numpy(), atol=1e-5, rtol=0)


def test_long_text_is_cut_to_the_position_table_and_reported(tiny_model, monkeypatch):
    long_text = " ".join(["the quick brown fox"] * 40)
    roberta = attnviz.load(f"hf:{tiny_model('roberta')}")  # 66 position rows, 64 usable after the pad offset
    trace = roberta.trace(long_text)
    full = len(roberta.tokenizer(long_text).input_ids)
    assert roberta.max_tokens == trace.n_tokens == 64 and trace.truncated == full - 64 > 0
    monkeypatch.setenv("ATTNVIZ_MAX_TOKENS", "16")  # T5 has no position table: only this cap applies
    t5 = open_model(f"hf:{tiny_model('t5')}")
    assert t5.max_tokens == 16 and t5.trace(long_text, target=TARGET).encoder.n_tokens == 16


def test_byte_level_and_sentencepiece_labels_read_like_the_tokenizers_own_decoding(tiny_model):
    text = "A naïve café in Zürich 😀\nHello world"
    for family in ("gpt2", "roberta", "llama", "t5"):
        tok = tf.AutoTokenizer.from_pretrained(tiny_model(family))
        ids = tok(text).input_ids
        special = tok.get_special_tokens_mask(ids, already_has_special_tokens=True)
        for token, is_special in zip(tok.convert_ids_to_tokens(ids), special):
            plain = tok.convert_tokens_to_string([token]).strip(" ")
            if not is_special and plain.strip() and "\ufffd" not in plain:  # whole characters, not blanks
                assert clean(token) == plain.replace("\n", "↵"), (family, token)
    gpt2 = tf.AutoTokenizer.from_pretrained(tiny_model("gpt2"))
    assert "café" in [clean(t) for t in gpt2.tokenize(text)]  # "ĠcafÃ©" is one token of this vocabulary


def hooks(net) -> set:
    return {(name, key) for name, m in net.named_modules() for key in (*m._forward_hooks, *m._forward_pre_hooks)}


def test_concurrent_traces_share_the_model_safely_and_leave_no_hooks(tiny_model):
    backend = attnviz.load(f"hf:{tiny_model('llama')}")
    installed = hooks(backend.net)  # transformers 5 installs its own output-capturing hooks on the first forward
    texts = [f"{TEXT} {i}" for i in range(6)]
    expected = [backend.trace(t).attentions for t in texts]
    results = {}
    threads = [threading.Thread(target=lambda i=i: results.update({i: backend.trace(texts[i])})) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, attn in enumerate(expected):
        np.testing.assert_array_equal(results[i].attentions, attn)
    assert hooks(backend.net) == installed


# ---- refusals: each says what is wrong in plain words ---------------------------------------------------------


def test_a_missing_path(tmp_path):
    with pytest.raises(ValueError, match="There is no folder"):
        attnviz.load(f"hf:{tmp_path / 'nope'}")
    with pytest.raises(ValueError, match="is a file"):
        (tmp_path / "config.json").write_text("{}")
        load_hf(str(tmp_path / "config.json"))


def test_a_folder_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="has no config.json"):
        load_hf(str(tmp_path))


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_safetensors(tiny_model, tmp_path, damage):
    folder = copy_model(tiny_model, "bert", tmp_path / "m")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00\xffnot a tensor" * 100)
    with pytest.raises(ValueError, match="is damaged"):
        load_hf(str(folder))


def test_weights_that_do_not_fit_the_config(tiny_model, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = copy_model(tiny_model, "bert", tmp_path / "m")
    weights = load_file(folder / "model.safetensors")
    del weights["encoder.layer.1.attention.self.query.weight"]
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(ValueError, match="do not fit its config.*random weights"):
        load_hf(str(folder))


def test_custom_code_and_unknown_model_types_are_refused(tiny_model, tmp_path):
    folder = copy_model(tiny_model, "bert", tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_x.XModel"}}))
    with pytest.raises(ValueError, match="needs its own Python code"):
        load_hf(str(folder))
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "my-own-transformer"}))
    with pytest.raises(ValueError, match="unknown to transformers"):
        load_hf(str(folder))


def test_pickle_checkpoints_only_with_the_operators_consent(tiny_model, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    safe = tiny_model("bert")
    folder = copy_model(tiny_model, "bert", tmp_path / "m")
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="only a pickle checkpoint.*ATTNVIZ_ALLOW_PICKLE=1"):
        load_hf(str(folder))
    monkeypatch.setenv("ATTNVIZ_ALLOW_PICKLE", "1")
    pickled = load_hf(str(folder)).trace(TEXT)
    np.testing.assert_array_equal(pickled.attentions, attnviz.trace(TEXT, f"hf:{safe}").attentions)


def test_weights_over_the_size_limit(tiny_model, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_MODEL_MB", "0.01")
    with pytest.raises(ValueError, match="over the limit of 0 MB.*ATTNVIZ_MAX_MODEL_MB"):
        load_hf(str(tiny_model("bert")))


def test_a_model_without_attention_weights(tiny_model):
    with pytest.raises(ValueError, match="does not return attention weights"):
        load_hf(str(tiny_model("fnet")))


def test_a_name_that_is_neither_folder_nor_hub_id():
    with pytest.raises(ValueError, match="neither a folder nor a Hugging Face model id"):
        load_hf("not a model!")


@pytest.mark.parametrize("how", ["HF_HUB_OFFLINE", "connection refused", "no answer"])
def test_an_unreachable_hub_fails_fast_and_says_to_use_a_folder(monkeypatch, tmp_path, how):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing to fall back on
    monkeypatch.setenv("ATTNVIZ_HUB_TIMEOUT", "1")
    with socket.socket() as silent, socket.socket() as closed:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts connections and never answers, like a hub behind a dead proxy
        closed.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        if how == "HF_HUB_OFFLINE":
            monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        else:
            port = (closed if how == "connection refused" else silent).getsockname()[1]
            monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
        start = time.monotonic()
        with pytest.raises(ValueError, match=r"Could not reach the Hugging Face hub for 'gpt2'.*hf:/path/to/folder"):
            attnviz.load("hf:gpt2")
        assert time.monotonic() - start < 5


def test_a_hub_id_in_the_local_cache_loads_offline(tiny_model, tmp_path, monkeypatch):
    from huggingface_hub import constants

    repo = tmp_path / "models--tiny--gpt2"
    shutil.copytree(tiny_model("gpt2"), repo / "snapshots" / ("0" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    backend = open_model("hf:tiny/gpt2")
    assert backend.key == "hf:tiny/gpt2" and backend.kind == "decoder"
    direct = attnviz.trace(TEXT, f"hf:{tiny_model('gpt2')}")
    np.testing.assert_array_equal(backend.trace(TEXT).attentions, direct.attentions)


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gemma2"])
def test_bfloat16_checkpoints_trace_in_their_own_dtype(tmp_path, model_type):
    """No float32 copy of the weights: queries and keys are captured in bf16, heads computed in float32 match the
    same bf16 folder loaded eager within bf16's tolerance (1e-2)."""
    from families import build

    from attnviz.backends.hf import CHECK_TEXT, TOLERANCE

    folder = build(model_type, tmp_path / model_type, dtype=torch.bfloat16)
    backend = load_hf(str(folder))
    assert {p.dtype for p in backend.net.parameters()} == {torch.bfloat16}
    assert backend.capture == "interface" and TOLERANCE[torch.bfloat16] == 1e-2
    trace = backend.trace(CHECK_TEXT)
    assert {(layer.q.dtype, layer.k.dtype) for layer in trace.weights.layers} == {(torch.bfloat16, torch.bfloat16)}
    assert trace.head(1, 2).dtype == np.float32
    ref = tf.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.bfloat16).eval()
    ids = tf.AutoTokenizer.from_pretrained(folder)(CHECK_TEXT).input_ids
    with torch.inference_mode():
        want = torch.cat(ref(torch.tensor([ids]), output_attentions=True).attentions).float().numpy()
    assert trace.tokens == tuple(tf.AutoTokenizer.from_pretrained(folder).convert_ids_to_tokens(ids))
    np.testing.assert_allclose(trace.attentions, want, atol=1e-2)
    visible = np.arange(1, trace.n_tokens + 1)  # keys row i sees
    assert (trace.attentions.max(-1) * visible).mean() > 1.5  # rows peak above uniform: a wrong mask would show
    assert np.abs(trace.attentions - want).max() > 0  # bf16 rounding is there: float32 eager would show none
    check_probabilities(trace.attentions, causal=True)


def test_opt_norms_follow_its_flattened_and_projected_hidden_states(tmp_path):
    """OPT flattens to (B·T, D) inside its layers, and opt-350m projects its last hidden state to a narrower
    width: the norms are per token, and the last hidden state is the residual stream before the projection."""
    from families import build

    folder = build("opt-350m", tmp_path / "opt")
    backend = load_hf(str(folder))
    trace = backend.trace(TEXT)
    ref = tf.OPTModel.from_pretrained(folder, attn_implementation="eager").eval()
    ids = torch.tensor([tf.AutoTokenizer.from_pretrained(folder)(TEXT).input_ids])
    seen = []
    hooks = [layer.fc2.register_forward_hook(lambda m, a, out: seen.append(out.norm(dim=-1))) for layer in
             ref.decoder.layers]
    try:
        with torch.inference_mode():
            out = ref(ids, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    np.testing.assert_allclose(trace.norms["ffn_out"], torch.stack(seen).numpy(), rtol=1e-5, atol=1e-5)  # (L, T)
    hidden = torch.cat(out.hidden_states[:-1]).numpy()  # (L, T, 64): the last one is 32 wide
    np.testing.assert_allclose(trace.hidden_states[:-1], hidden, atol=1e-5)
    with torch.inference_mode():
        projected = ref.decoder.project_out(torch.from_numpy(trace.hidden_states[-1].copy()))  # (T, 32)
    np.testing.assert_allclose(projected.numpy(), out.hidden_states[-1][0].numpy(), atol=1e-5)


def test_a_shared_layer_model_traces_eager_without_norms_and_says_so(tmp_path):
    """ALBERT runs one layer module for every layer: the capture sees one call per module, so it runs eager
    (visibly), and the hooks' statistics of one module for two layers are left out, not mislabelled."""
    from families import build

    backend = load_hf(str(build("albert", tmp_path / "albert")))
    trace = backend.trace(TEXT)
    assert backend.capture == trace.capture == "eager" and trace.n_layers == 2
    assert trace.norms == {} and "albert is wired differently" in backend.norm_note


def test_a_model_that_does_not_really_switch_its_attention_is_refused(tiny_backend, monkeypatch):
    """transformers only warns when a class cannot switch: the config is checked, never assumed."""
    backend = tiny_backend("llama")
    monkeypatch.setattr(backend.net, "set_attn_implementation", lambda name: None)
    with pytest.raises(ValueError, match="attnviz cannot trace llama models exactly: it cannot switch its "
                                         "attention to eager after loading"):
        backend._use("eager")


def test_a_causal_stack_whose_weights_reach_later_tokens_is_caught():
    from attnviz.backends.hf import causal_leak
    from attnviz.core.weights import DenseWeights, LayerQK, OnDemandWeights

    q, k = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    assert causal_leak(OnDemandWeights([LayerQK(q, k, 0.5, causal=True)])) == ""
    assert "layer 0's mask" in causal_leak(OnDemandWeights([LayerQK(q, k, 0.5)]))
    below = torch.ones(5, 5, dtype=torch.bool).tril()[None]  # (1, T, T) a causal mask the model built itself
    assert causal_leak(OnDemandWeights([LayerQK(q, k, 0.5, mask=below)])) == ""
    dense = np.full((1, 1, 3, 3), 1 / 3, np.float32)
    assert "0.33 of their weight on later tokens" in causal_leak(DenseWeights(dense))
    assert causal_leak(DenseWeights(np.tril(dense) / np.tril(dense).sum(-1, keepdims=True))) == ""


def test_models_check_prints_one_models_row(tiny_model):
    """``python -m attnviz models --check`` runs the matrix's check for one folder and prints its row."""
    import subprocess
    import sys

    def check(folder):
        return subprocess.run([sys.executable, "-m", "attnviz", "models", "--check", f"hf:{folder}"],
                              capture_output=True, text=True, timeout=300)

    ok = check(tiny_model("llama"))
    assert ok.returncode == 0, ok.stderr
    header, rule, row = ok.stdout.strip().splitlines()
    family, path, dtype, gap, reason = [c.strip() for c in row.strip("|").split("|")]
    assert (family, path, dtype, reason) == ("llama", "interface", "float32", "") and float(gap) <= 1e-5
    refused = check(tiny_model("fnet"))
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout.strip().splitlines()[-1].startswith(
        "| fnet | refused |  | — | attnviz cannot trace fnet models exactly: it does not return attention weights")
    wrong = subprocess.run([sys.executable, "-m", "attnviz", "models", "--check", "builtin:seed"],
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2 and "--check takes a Hugging Face model" in wrong.stderr
