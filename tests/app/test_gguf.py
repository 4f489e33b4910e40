"""A real pretrained LLM from a GGUF file: SmolLM2-135M-Instruct, loaded once per session (tests/real_models.py).

Its heads equal transformers' eager attention over the same dequantised weights; the repeated-token probe finds
its induction heads; Generate continues as ``model.generate`` does; the chat template runs in the library and on
the pages; its byte-level tokens read as text. GGUF files that cannot be loaded are refused in words.
"""

import json

import numpy as np
import pytest
import torch

from attnviz.analysis.interventions import Knockout, run
from attnviz.analysis.roles import probe_trace, role_scores
from attnviz.backends.common import chat_prompt
from attnviz.backends.generation import Sampling
from attnviz.backends.gguf import read, smollm2_path
from attnviz.backends.hf import load_hf
from attnviz.core.tokens import labels
from helpers import chart_specs, decode, ok, open_page
from real_models import smollm2_key
from test_analysis_pages import charts

SHORT = "The quick brown fox jumps over the lazy dog."
MIXED = "A naïve café in Zürich:\n\tcrème brûlée 😀, then\n\nanother line."
PARAGRAPH = ("Attention lets each token of a text gather information from the tokens before it. In a trained model, "
             "some heads look at the previous token, some at the first, and some copy what followed an earlier copy "
             "of the current token. The river ran past the old mill, and the miller counted 17 sacks of flour. ")
LONG = " ".join(f"Part {i}. {PARAGRAPH}" for i in range(14))  # 1,012 tokens


def eager_heads(net, ids: list) -> list[np.ndarray]:
    """Each layer's (H, T, T) weights from transformers' own eager attention."""
    with torch.inference_mode():
        out = net(torch.tensor([ids]), output_attentions=True, use_cache=False)  # (1, T)
    return [a[0].numpy() for a in out.attentions]


def gap(trace, reference: list[np.ndarray]) -> float:
    return max(float(np.abs(trace.head(layer, h) - ref[h]).max())
               for layer, ref in enumerate(reference) for h in range(ref.shape[0]))


def test_smollm2_loads_from_its_gguf_file_as_it_is(smollm2):
    assert smollm2.key == smollm2_key() and str(smollm2_path()).endswith(".gguf")
    assert (smollm2.kind, smollm2.n_layers, smollm2.n_heads, smollm2.max_tokens) == ("decoder", 30, 9, 8192)
    assert smollm2.capture == "interface" and smollm2.net.dtype == torch.float32
    assert "GGUF file (Q4_1, quantised), dequantised to float32" in smollm2.description
    assert smollm2.can("chat") and smollm2.can("generate")


@pytest.mark.parametrize("text", [SHORT, MIXED, LONG], ids=["short", "mixed", "1000-tokens"])
def test_heads_equal_eager_attention_of_the_same_dequantised_weights(smollm2, smollm2_eager, text):
    trace = smollm2.trace(text)
    ids = smollm2.tokenizer(text)["input_ids"]
    assert list(trace.tokens) == smollm2.tokenizer.convert_ids_to_tokens(ids)
    if text is LONG:
        assert 900 <= trace.n_tokens <= 1200, trace.n_tokens
    assert gap(trace, eager_heads(smollm2_eager, ids)) <= 1e-5


def test_the_repeated_token_probe_finds_induction_heads(smollm2):
    induction = role_scores(probe_trace(smollm2))["induction"]  # (L, H)
    assert induction.shape == (30, 9) and induction.max() >= 0.8, induction.max()


def test_generate_continues_as_model_generate_does_greedily(smollm2, smollm2_eager):
    for prompt, chat in (("Once upon a time, in a small village by the sea,", False),
                         ("What is the capital of France?", True)):
        g = smollm2.generate(prompt, Sampling(max_new_tokens=16), chat=chat)
        text = chat_prompt(smollm2.tokenizer, prompt)[0] if chat else prompt
        ids = smollm2.tokenizer(text, add_special_tokens=not chat)["input_ids"]
        with torch.inference_mode():
            want = smollm2_eager.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                          max_new_tokens=16, do_sample=False, num_beams=1,
                                          pad_token_id=smollm2.tokenizer.eos_token_id)[0].tolist()  # (T + new,)
        assert g.prompt_len == len(ids)
        assert smollm2.tokenizer.convert_tokens_to_ids(list(g.trace.tokens)) == want, (prompt, g.continuation)
        assert g.continuation == smollm2.tokenizer.decode(want[len(ids):], skip_special_tokens=True)
    assert "Paris" in g.continuation  # the instruct model answers its question in the template


def test_chat_template_on_and_off(smollm2, smollm2_eager):
    plain = smollm2.trace(SHORT)
    chat = smollm2.trace(SHORT, chat=True)
    rendered = chat_prompt(smollm2.tokenizer, SHORT)[0]
    assert chat.text == rendered and rendered.startswith("<|im_start|>system") and rendered.endswith("assistant\n")
    assert chat.tokens[0] == "<|im_start|>" and chat.n_tokens > plain.n_tokens + 10
    # the template's tokens are special (hidden with the special tokens); the user's text is not
    ours = [t for t, s in zip(chat.tokens, chat.special) if not s]
    assert ours == list(plain.tokens) and not plain.special.any()
    ids = smollm2.tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert gap(chat, eager_heads(smollm2_eager, ids)) <= 1e-5
    trace, logits = smollm2.run_with_trace(SHORT, chat=True)
    assert list(trace.tokens) == list(chat.tokens) and np.array_equal(trace.special, chat.special)
    assert logits.shape == (chat.n_tokens, smollm2.net.config.vocab_size)


def test_interventions_and_the_scorer_take_the_chat_template(smollm2):
    chat = smollm2.trace(SHORT, chat=True)
    effect = run(smollm2, SHORT, [Knockout(layer=0, head=0, key=0)], chat=True)
    assert list(effect.base.trace.tokens) == list(chat.tokens)
    assert np.array_equal(effect.base.trace.special, chat.special)
    np.testing.assert_allclose(effect.base.trace.head(3, 4), chat.head(3, 4), atol=1e-6)
    assert not np.allclose(effect.edited.logprobs, effect.base.logprobs)  # the edit runs inside the forward
    s = smollm2.scorer(SHORT, chat=True)
    assert len(s.embeds) == chat.n_tokens and s.position == chat.n_tokens - 1


def test_a_model_without_a_chat_template_says_so(tiny_backend):
    gpt2 = tiny_backend("gpt2")
    assert not gpt2.can("chat")
    with pytest.raises(ValueError, match="no chat template"):
        gpt2.trace(SHORT, chat=True)


def test_generate_page_offers_the_chat_template_and_the_link_keeps_it(smollm2):
    # each view from a link: a typed model key does not survive AppTest's widget changes (test_generate_page)
    view = dict(model=smollm2_key(), text="What is the capital of France?", gen_new="4")
    at = ok(open_page("pages/8_Generate.py", **view))
    box = at.checkbox(key="chat")
    assert box.label == "Apply the model's chat template" and not box.value
    plain = charts(at)["gen_heatmap"]
    at = ok(open_page("pages/8_Generate.py", **view, chat="true"))
    assert at.checkbox(key="chat").value and at.query_params["chat"] in ("true", ["true"])
    g = smollm2.generate(view["text"], Sampling(4), chat=True)
    templated = decode(charts(at)["gen_heatmap"]["data"][0]["z"])
    assert len(templated) == g.trace.n_tokens > len(decode(plain["data"][0]["z"])) + 10
    np.testing.assert_allclose(templated, g.trace.head(0, 0), atol=1e-6)  # the defaults: layer 0, head 0


def test_attention_page_hides_the_templates_tokens_with_the_special_tokens(smollm2):
    at = ok(open_page("pages/1_Attention.py", model=smollm2_key(), text=SHORT, chat="true", hide_special="true",
                      layer="2", head="3"))
    trace = smollm2.trace(SHORT, chat=True)
    keep = ~trace.special
    kept = trace.head(2, 3)[keep][:, keep]
    detail = next(spec for k, spec in charts(at).items() if k.startswith("detail"))
    np.testing.assert_allclose(decode(detail["data"][0]["z"]), kept / kept.sum(-1, keepdims=True), atol=1e-6)
    assert detail["data"][0]["x"] == labels(np.array(trace.tokens)[keep]) and len(detail["data"][0]["x"]) == 10


def test_byte_level_tokens_read_as_text_in_every_figure(smollm2):
    text = "Hello world,\nthe cat sat on the mat."
    trace = smollm2.trace(text)
    assert "Ġworld" in trace.tokens and "Ċ" in trace.tokens
    for page in ("pages/1_Attention.py", "pages/8_Generate.py"):
        at = ok(open_page(page, model=smollm2_key(), text=text, gen_new="3"))
        shown = json.dumps([s["layout"].get(axis, {}).get(field) for s in chart_specs(at)
                             for axis in ("xaxis", "yaxis") for field in ("ticktext", "categoryarray")]
                            + [decode(d.get(a)) if isinstance(d.get(a), dict) else d.get(a)
                               for s in chart_specs(at) for d in s["data"] for a in ("x", "y")
                               if isinstance(d.get(a), (list, dict))], default=str, ensure_ascii=False)
        assert "Ċ" not in shown and "▁" not in shown and "↵" in shown, page
        assert "Ġworld" not in shown and "world" in shown


# -- refused in words --------------------------------------------------------------------------------------------

def write_gguf(path, architecture: str = "rwkv6"):
    """A small, well-formed GGUF file of ``architecture`` (one tensor)."""
    import gguf

    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny")
    w.add_tensor("token_embd.weight", np.ones((8, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_of_an_architecture_transformers_cannot_read_is_refused_in_words(tmp_path):
    file = write_gguf(tmp_path / "tiny-rwkv.gguf")
    assert read(file).architecture == "rwkv6"
    for name in (str(file), str(tmp_path)):  # the file, or the folder that holds it
        with pytest.raises(ValueError, match="holds a 'rwkv6' model, which transformers cannot read from a GGUF"):
            load_hf(name)


def test_a_damaged_gguf_file_is_refused_in_words(tmp_path):
    whole = write_gguf(tmp_path / "whole.gguf", "llama").read_bytes()
    cut = tmp_path / "cut" / "model.gguf"
    cut.parent.mkdir()
    cut.write_bytes(whole[: len(whole) // 2])
    (tmp_path / "junk.gguf").write_bytes(b"this is not a model at all\n" * 10)
    for file in (cut, tmp_path / "junk.gguf"):
        with pytest.raises(ValueError, match="is damaged or not a GGUF file"):
            load_hf(str(file))


def test_a_folder_of_several_gguf_files_asks_for_one(tmp_path):
    write_gguf(tmp_path / "a.Q4.gguf")
    write_gguf(tmp_path / "a.Q8.gguf")
    with pytest.raises(ValueError, match="holds 2 GGUF files"):
        load_hf(str(tmp_path))


def test_the_size_check_counts_the_dequantised_weights(monkeypatch):
    file = smollm2_path()
    assert file.stat().st_size < 100 * 2**20 < read(file).float32_bytes  # 94 MB on disk, 513 MB in float32
    monkeypatch.setenv("ATTNVIZ_MAX_MODEL_MB", "100")
    with pytest.raises(ValueError, match=r"\(dequantised to float32, as transformers loads them\) are 513 MB, over "
                                         r"the limit of 100 MB"):
        load_hf(str(file))
