"""Budgets from the config, before anything is allocated: parameters, heads, one trace's attention, forwards."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers as tf

import attnviz
from attnviz.analysis import head_importance
from attnviz.backends import open_model
from attnviz.backends.builtin import minilm_path
from attnviz.core.budget import heads, parameters
from conftest import ROOT
from helpers import open_page
from tiny_models import FAMILIES

KINDS = {"gpt2": "decoder", "llama": "decoder", "t5": "encoder-decoder", "byt5": "encoder-decoder",
         "bart": "encoder-decoder", "marian": "encoder-decoder", "encoder-decoder": "encoder-decoder"}


@pytest.mark.parametrize("family", FAMILIES)
def test_counts_from_the_config_match_the_loaded_model(tiny_backend, family):
    backend = tiny_backend(family)
    net, config = backend.net, backend.net.config
    loaded = sum(p.numel() for p in net.parameters())
    assert parameters(config, KINDS.get(family, "encoder")) == loaded
    trace = backend.trace("A short text.", **({"target": "A short text."} if family in KINDS and
                                              KINDS[family] == "encoder-decoder" else {}))
    stacks = [trace.encoder, trace.decoder] if trace.kind == "encoder-decoder" else [trace]
    self_heads = sum(s.n_layers * s.n_heads for s in stacks)
    cross = trace.cross_attentions.shape[0] * trace.cross_attentions.shape[1] if trace.kind == "encoder-decoder" else 0
    assert heads(config) == self_heads + cross


def _bert_folder(folder, **config):
    """A real BERT folder (MiniLM's WordPiece, safetensors) with the given config: small on disk."""
    net = tf.BertModel(tf.BertConfig(vocab_size=30522, max_position_embeddings=512, **config))
    net.save_pretrained(folder)
    tf.AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    return folder


# A fresh interpreter, so the peak RSS (ru_maxrss) is this load's: imports and the meta-device count first.
MEASURE = textwrap.dedent("""
    import json, resource, sys
    from attnviz.backends import _import_transformers, open_model
    from attnviz.core.budget import parameters
    import transformers as tf

    _import_transformers()
    parameters(tf.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64), "encoder")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        open_model(sys.argv[1])
        error = None
    except ValueError as e:
        error = str(e)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"error": error, "grew_mb": after - before}))
""")


def measure(key: str, **env) -> dict:
    import os

    done = subprocess.run([sys.executable, "-c", MEASURE, key], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_many_heads_in_a_small_folder_are_refused_before_memory_grows(tmp_path):
    """The reported attack: 48 layers × 64 heads, a few MB on disk, 3 GiB per 512-token trace."""
    folder = _bert_folder(tmp_path / "many-heads", num_hidden_layers=48, num_attention_heads=64, hidden_size=64,
                          intermediate_size=64)
    assert sum(f.stat().st_size for f in folder.iterdir()) < 40 * 2**20
    out = measure(f"hf:{folder}")
    assert out["error"] == ("This model has attention heads (layers × heads) 3,072, over this server's budget of "
                            "1,024. An operator can raise it with ATTNVIZ_MAX_HEADS."), out
    assert out["grew_mb"] < 50, out


def test_too_many_parameters_are_refused_from_the_config_alone(tmp_path):
    """Counted on the meta device: 471 M parameters (1.8 GB as float32) are refused without allocating them."""
    folder = tmp_path / "big"
    folder.mkdir()
    tf.BertConfig(num_hidden_layers=8, hidden_size=2048, num_attention_heads=16, intermediate_size=8192
                  ).save_pretrained(folder)
    out = measure(f"hf:{folder}")  # 471 M fit the default budget: the folder is then refused for its missing weights
    assert "has no model weights" in out["error"], out
    out = measure(f"hf:{folder}", ATTNVIZ_MAX_PARAMS_M="300")
    assert out["error"] == ("This model has parameters 471 M (1.8 GB as float32), over this server's budget of "
                            "300 M. An operator can raise it with ATTNVIZ_MAX_PARAMS_M."), out
    assert out["grew_mb"] < 50, out


def test_half_precision_weights_load_and_count_in_their_own_dtype(tmp_path, monkeypatch):
    """fp16 on disk loads as fp16 (no float32 copy of the weights); the budget counts its parameters."""
    folder = tmp_path / "fp16"
    net = tf.BertModel(tf.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128)).half()
    net.save_pretrained(folder)
    tf.AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    n = sum(p.numel() for p in net.parameters())
    disk_mb = (folder / "model.safetensors").stat().st_size / 2**20
    assert disk_mb < n * 4 / 2**20 / 1.9  # the file is about half the float32 size
    monkeypatch.setenv("ATTNVIZ_MAX_PARAMS_M", str(n / 1e6 * 0.9))
    with pytest.raises(ValueError, match="ATTNVIZ_MAX_PARAMS_M"):
        open_model(f"hf:{folder}")
    monkeypatch.setenv("ATTNVIZ_MAX_PARAMS_M", str(n / 1e6 * 1.1))
    assert open_model(f"hf:{folder}").net.dtype == torch.float16


def test_ablation_beyond_the_forward_budget_is_refused_before_the_first_pass(monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_FORWARDS", "50")
    seed = attnviz.load("builtin:seed")  # 6 × 8 = 48 heads, 49 passes: within
    scores, _ = head_importance(seed, "A short text.")
    assert scores.shape == (6, 8)
    calls = []
    with pytest.raises(ValueError) as refused:
        head_importance(attnviz.load("builtin:minilm"), "A short text.", lambda k, n: calls.append(k))
    assert str(refused.value) == ("Head importance by ablation needs 73 forward passes, over this server's budget "
                                  "of 50. An operator can raise it with ATTNVIZ_MAX_FORWARDS.")
    assert not calls


def test_analysis_page_states_the_budgets_before_running(monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_FORWARDS", "50")
    monkeypatch.setenv("ATTNVIZ_MAX_FLOWS", "20")
    at = open_page("pages/4_Analysis.py", relevance_method="flow")
    assert not at.exception and not at.error
    assert any("ATTNVIZ_MAX_FORWARDS" in i.value.replace("\\", "") and "73 forward passes" in i.value for i in at.info)
    assert at.button(key="ablate").disabled
    assert any("ATTNVIZ_MAX_FLOWS" in w.value and "(6 layers × 16 tokens)" in w.value for w in at.warning)


def test_the_formula_for_configs_that_cannot_be_built_bare_is_close():
    """When a config's class cannot be built on the meta device, the usual formula stands in."""
    from attnviz.core.budget import _estimate

    for config, kind in [(tf.BertConfig(), "encoder"), (tf.GPT2Config(), "decoder"), (tf.BartConfig(), "encoder-decoder")]:
        exact = parameters(config, kind)
        assert 0.85 < _estimate(config) / exact < 1.15, (type(config).__name__, _estimate(config), exact)
