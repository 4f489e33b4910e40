"""TransformerLens and nnsight (issue 54): a TransformerLens model traced from its own queries and keys (every head
equals its ``cache["pattern", l]``), caches and nnsight traces opened, and attnviz's edits exported to
``run_with_hooks`` and to nnsight code that reproduce attnviz's edited log-probabilities.

Models are tiny and random, built here with no download: TransformerLens-native bridges of several shapes
(attention-only, grouped-query, rotary with grouped-query), and Hugging Face GPT-2 and Llama booted as bridges.
"""

import runpy

import numpy as np
import pytest
import torch
import transformers as tf
from transformer_lens import TransformerBridge, TransformerBridgeConfig
import transformer_lens.model_bridge.sources.native  # noqa: F401  registers TransformerBridge.boot_native
import transformer_lens.model_bridge.sources.transformers  # noqa: F401  registers boot_transformers

import attnviz
from attnviz.analysis import interventions as iv
from attnviz.ui.notebook import explorer
from helpers import ok, open_page
from tiny_models import tokenizer as tiny_tokenizer

TEXT = "The quick brown fox jumps over the lazy dog."
NATIVE = {  # TransformerBridgeConfig fields beyond the common ones
    "attention-only": dict(attn_only=True),
    "grouped-query": dict(n_key_value_heads=2, normalization_type="LN"),
    "rotary": dict(n_key_value_heads=2, positional_embedding_type="rotary", normalization_type="RMS"),
}
SHAPES = [*NATIVE, "hf-gpt2", "hf-gpt2-compat", "hf-llama"]  # compat: enable_compatibility_mode() (folded norms)
EDITS = {
    "knockout": [iv.Knockout(1, 0, query=5, key=3), iv.Knockout(0, None, key=0)],
    "pattern": [iv.Pattern(1, 2, "previous"), iv.Pattern(0, None, "uniform"), iv.Pattern(1, 0, "first")],
    "zero-value": [iv.ZeroValue(3), iv.ZeroValue(2, layer=1, head=1)],
}


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """A tiny byte-level BPE tokenizer saved to a folder (TransformerLens reloads a tokenizer by its path)."""
    folder = tmp_path_factory.mktemp("lens-tokenizer")
    tiny_tokenizer("gpt2").save_pretrained(folder)
    return folder


def _llama(folder) -> None:
    """A tiny Llama (rotary, 4 query heads over 2 key-value heads of width 8) saved with its tokenizer."""
    tok = tiny_tokenizer("llama")
    config = tf.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                            bos_token_id=1, eos_token_id=2)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        tf.LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)


@pytest.fixture(scope="module")
def bridge(tokenizer_folder, tiny_model, tmp_path_factory):
    """``bridge(shape)``: a TransformerBridge of that shape, built once per module."""
    made = {}

    def get(shape: str):
        if shape not in made:
            if shape in NATIVE:
                tok = tf.AutoTokenizer.from_pretrained(tokenizer_folder)
                cfg = TransformerBridgeConfig(n_layers=2, d_model=32, n_ctx=64, d_head=8, n_heads=4, d_vocab=len(tok),
                                              act_fn="gelu", seed=0, **NATIVE[shape])
                made[shape] = TransformerBridge.boot_native(cfg, tokenizer=tok, model_name=f"tiny-{shape}")
            else:
                if shape.startswith("hf-gpt2"):
                    folder = tiny_model("gpt2")
                else:
                    folder = tmp_path_factory.mktemp("lens-llama")
                    _llama(folder)
                net = tf.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
                made[shape] = TransformerBridge.boot_transformers(str(folder), hf_model=net,
                                                                  tokenizer=tf.AutoTokenizer.from_pretrained(folder))
                if shape.endswith("compat"):
                    made[shape].enable_compatibility_mode()
        return made[shape]

    return get


def _logprobs(logits: torch.Tensor, ids: torch.Tensor) -> np.ndarray:
    """(T − 1,) log-probability of each actual next token from logits (T, V) and ids (T,)."""
    return torch.log_softmax(logits.detach().double(), -1)[:-1].gather(-1, ids[1:, None])[:, 0].numpy()


@pytest.mark.parametrize("shape", SHAPES)
def test_heads_equal_the_caches_patterns(bridge, shape):
    model = bridge(shape)
    ids = model.to_tokens(TEXT)  # (1, T)
    _, cache = model.run_with_cache(ids)
    trace = attnviz.trace(ids, model)
    assert trace.kind == "decoder" and trace.capture == "interface"
    assert trace.tokens == tuple(model.tokenizer.convert_ids_to_tokens(ids[0].tolist()))
    for layer in range(model.cfg.n_layers):
        want = cache["pattern", layer][0].numpy()  # (H, T, T)
        assert np.abs(trace.weights.layer(layer) - want).max() <= 1e-5
        for head in range(model.cfg.n_heads):
            assert np.abs(trace.head(layer, head) - want[head]).max() <= 1e-5
    assert trace.hidden_states.shape == (model.cfg.n_layers + 1, ids.shape[1], model.cfg.d_model)
    np.testing.assert_allclose(trace.hidden_states[-1], cache[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"][0],
                               atol=1e-6)
    # A text goes through the model's own to_tokens: the same ids, the same weights.
    by_text = attnviz.trace(TEXT, model)
    assert by_text.tokens == trace.tokens
    assert np.abs(by_text.weights.dense() - trace.weights.dense()).max() == 0
    # The model's own hooks are all gone afterwards.
    assert not any(h._forward_hooks for h in model.hook_dict.values())


def test_load_is_registered_once_and_refuses_what_it_cannot_trace(bridge, tokenizer_folder):
    model = bridge("attention-only")
    backend = attnviz.load(model)
    assert attnviz.load(model) is backend and attnviz.load(backend.key) is backend
    assert backend.key == "lens:tiny-attention-only" and backend.can("token_ids") and backend.can("outputs")
    with pytest.raises(ValueError, match="TransformerLens model"):
        attnviz.load(object())
    cfg = TransformerBridgeConfig(n_layers=1, d_model=16, n_ctx=16, d_head=4, n_heads=4, d_vocab=50, seed=0)
    with pytest.raises(ValueError, match="no tokenizer"):
        attnviz.load(TransformerBridge.boot_native(cfg))
    with pytest.raises(ValueError, match="whole numbers"):
        attnviz.trace([1.5, 2], model)


def test_any_model_traces_token_ids_as_given(tiny_model):
    key = f"hf:{tiny_model('gpt2')}"
    by_text = attnviz.trace(TEXT, key)
    ids = attnviz.load(key).tokenizer(TEXT)["input_ids"]
    by_ids = attnviz.trace(ids, key)
    assert by_ids.tokens == by_text.tokens
    assert np.abs(by_ids.weights.dense() - by_text.weights.dense()).max() == 0


@pytest.mark.parametrize("shape", ["attention-only", "rotary", "hf-gpt2", "hf-gpt2-compat", "hf-llama"])
@pytest.mark.parametrize("kind", list(EDITS))
def test_exported_edits_reproduce_attnvizs_log_probabilities(bridge, shape, kind):
    model = bridge(shape)
    ids = model.to_tokens(TEXT)[0]  # (T,) with the BOS the model prepends
    edits = EDITS[kind]
    effect = iv.run(attnviz.load(model), ids[1:].tolist(), edits)  # attnviz prepends the BOS again
    hooked = _logprobs(model.run_with_hooks(ids[None], fwd_hooks=iv.to_transformer_lens(edits))[0], ids)
    plain = _logprobs(model(ids[None])[0], ids)
    assert np.abs(effect.base.logprobs - plain).max() <= 1e-4
    assert np.abs(effect.edited.logprobs - hooked).max() <= 1e-4
    assert np.abs(effect.edited.logprobs - effect.base.logprobs).max() > 1e-3  # the edits did change the output


def test_patch_hooks_replace_a_heads_output(bridge):
    model = bridge("grouped-query")
    ids = model.to_tokens(TEXT)[0]
    backend = attnviz.load(model)
    _, _, editor = iv.forward(backend, ids[1:].tolist(), keep=True)
    _, cache = model.run_with_cache(ids[None])
    output = editor.outputs[1][2]  # (T, Dh) layer 1, head 2 as it is
    np.testing.assert_allclose(output, cache["z", 1][0, :, 2], atol=1e-5)
    swapped = iv.Patch(1, 2, np.zeros_like(output))
    effect = iv.run(backend, ids[1:].tolist(), [swapped])
    hooked = _logprobs(model.run_with_hooks(ids[None], fwd_hooks=iv.to_transformer_lens([swapped]))[0], ids)
    assert np.abs(effect.edited.logprobs - hooked).max() <= 1e-4


def test_a_cache_opens_with_heads_on_demand_or_as_its_patterns(bridge):
    model = bridge("rotary")
    ids = model.to_tokens(TEXT)
    _, cache = model.run_with_cache(ids)
    trace = attnviz.from_transformer_lens(cache, ids)
    assert trace.capture == "interface" and trace.kind == "decoder"  # from hook_q/hook_k, rotated by the model
    assert trace.tokens == tuple(model.tokenizer.convert_ids_to_tokens(ids[0].tolist()))
    _, patterns = model.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_pattern"))
    dense = attnviz.from_transformer_lens(patterns, model.to_str_tokens(ids))
    assert dense.capture == "dense" and dense.kind == "decoder"
    for layer in range(2):
        want = cache["pattern", layer][0].numpy()
        assert np.abs(trace.weights.layer(layer) - want).max() <= 1e-5
        assert np.abs(dense.weights.layer(layer) - want).max() == 0
    _, batch = model.run_with_cache(torch.cat([ids, ids]))
    with pytest.raises(ValueError, match="batch of 2"):
        attnviz.from_transformer_lens(batch, ids)
    second = attnviz.from_transformer_lens(batch, ids, item=1)
    assert np.abs(second.weights.dense() - trace.weights.dense()).max() < 1e-5
    _, nothing = model.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_embed"))
    with pytest.raises(ValueError, match="no attention"):
        attnviz.from_transformer_lens(nothing, ids)
    widget = explorer(trace, layer=1, head=3)  # the notebook explorer opens it
    assert (widget.info["L"], widget.info["H"], widget.info["Tq"], widget.info["causal"]) == (2, 4, ids.shape[1], True)
    assert widget.detail and not widget.error


def test_an_nnsight_trace_opens_and_its_exported_edits_match(tiny_model, tmp_path):
    from nnsight import NNsight

    folder = tiny_model("llama")
    model = NNsight(tf.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager"))
    tok = tf.AutoTokenizer.from_pretrained(folder)
    backend = attnviz.load(f"hf:{folder}")
    input_ids = torch.tensor([tok(TEXT)["input_ids"]])  # (1, T) with its BOS
    # The attention calls an nnsight trace saved (a script file: nnsight reads the with block's source back).
    script = tmp_path / "saved.py"
    script.write_text("saved = []\nwith model.trace(input_ids):\n    for layer in model.model.layers:\n"
                      "        saved.append(layer.self_attn.source.attention_interface_1.inputs.save())\n")
    saved = runpy.run_path(str(script), init_globals={"model": model, "input_ids": input_ids})["saved"]
    trace = attnviz.from_nnsight(saved, input_ids, tokenizer=tok)
    reference = backend.trace_ids(input_ids[0].tolist(), add_special_tokens=False)
    assert trace.tokens == reference.tokens and trace.kind == "decoder"
    assert np.abs(trace.weights.dense() - reference.weights.dense()).max() <= 1e-5
    widget = explorer(trace)
    assert widget.info["Tq"] == input_ids.shape[1] and widget.detail and not widget.error
    # to_nnsight's code, run as a person would paste it, gives attnviz's edited log-probabilities.
    edits = [iv.Knockout(1, 0, query=5, key=3), iv.Pattern(0, 1, "previous"), iv.ZeroValue(2, layer=1)]
    script = tmp_path / "edited.py"  # a file of its own: nnsight reads each file's source once
    script.write_text(iv.to_nnsight(edits))
    logits = runpy.run_path(str(script), init_globals={"model": model, "input_ids": input_ids})["logits"]
    effect = iv.run(backend, input_ids[0, 1:].tolist(), edits)
    assert np.abs(_logprobs(logits[0], input_ids[0]) - effect.edited.logprobs).max() <= 1e-4
    assert np.abs(effect.edited.logprobs - effect.base.logprobs).max() > 1e-3
    with pytest.raises(ValueError, match="no spelling"):
        iv.to_nnsight([iv.Pattern(0, 0, np.eye(3))])
    with pytest.raises(ValueError, match="n_layers"):
        iv.to_nnsight([iv.ZeroValue(1)])
    with pytest.raises(ValueError, match="saved inputs"):
        attnviz.from_nnsight([object()], input_ids, tokenizer=tok)


def test_pages_render_a_transformer_lens_model(bridge):
    key = attnviz.load(bridge("rotary")).key
    at = ok(open_page("pages/1_Attention.py", model=key, text=TEXT))
    assert at.get("plotly_chart")
    at = ok(open_page("pages/2_Positional.py", model=key, text=TEXT))  # rotary, from the model's config
    assert any("rotary" in m.value for m in [*at.markdown, *at.caption, *at.info])
    at = ok(open_page("pages/11_Interventions.py", model=key, text=TEXT, edits="ko:1.0:q5:k3,zv:3"))
    snippets = [c.value for c in at.code]
    assert any("to_transformer_lens(edits)" in s and "Knockout(layer=1, head=0, query=5, key=3)" in s for s in snippets)
    assert any("nn_functional_softmax_0" in s for s in snippets)
