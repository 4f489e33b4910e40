"""``python -m attnviz generate`` and ``roles`` run as a user runs them, compared with the library in-process."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from attnviz.analysis.roles import probe_trace, role_scores, role_table
from attnviz.backends.hf import load_hf
from attnviz.export import from_npz
from attnviz.backends.generation import Sampling
from conftest import ROOT

PROMPT = "The quick brown fox jumps over the lazy dog. The quick"


def run(args, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnviz", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def gpt2(tiny_model):
    folder = str(tiny_model("gpt2"))
    return folder, load_hf(folder)


def test_generate_writes_the_continuation_and_its_trace(gpt2, tmp_path):
    folder, backend = gpt2
    out = tmp_path / "g.npz"
    r = run(["generate", "--model", folder, "--text", PROMPT, "--new-tokens", "7", "--temperature", "0.9",
             "--top-k", "40", "--seed", "11", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    g = backend.generate(PROMPT, Sampling(7, 0.9, 40, 11))
    assert r.stdout == g.continuation + "\n"
    trace = from_npz(out)
    assert trace.tokens == g.trace.tokens and trace.kind == "decoder"
    np.testing.assert_allclose(trace.attentions, g.trace.attentions, atol=1e-6)
    with np.load(out, allow_pickle=False) as f:
        assert int(f["generation/prompt_len"]) == g.prompt_len
        np.testing.assert_allclose(f["generation/top_probs"], g.top_probs, atol=1e-9)
        assert f["generation/top_tokens"].tolist() == [list(row) for row in g.top_tokens]
    assert f"{g.prompt_len} prompt + {g.n_new} generated tokens" in r.stderr


def test_roles_writes_text_and_probe_scores(gpt2, tmp_path):
    folder, backend = gpt2
    out = tmp_path / "roles.csv"
    r = run(["roles", "--model", folder, "--text", PROMPT, "--out", str(out)])
    assert r.returncode == 0, r.stderr
    want = role_table(role_scores(backend.trace(PROMPT)), role_scores(probe_trace(backend)))
    pd.testing.assert_frame_equal(pd.read_csv(out), want, check_exact=False, atol=1e-9)


@pytest.mark.parametrize("args, message", [
    (["generate", "--model", "builtin:minilm", "--text", "hi", "--out", "x.npz"], "not a causal language model"),
    (["generate", "--model", "{gpt2}", "--text", "  ", "--out", "x.npz"], "empty"),
    (["generate", "--model", "{gpt2}", "--text", "hi", "--new-tokens", "0", "--out", "x.npz"], "new tokens"),
    (["generate", "--model", "{gpt2}", "--text", "hi", "--out", "x.txt"], ".npz"),
    (["roles", "--model", "{gpt2}", "--file", "no/such.txt", "--out", "x.csv"], "cannot read"),
])
def test_bad_input_is_one_line_and_status_2(gpt2, args, message):
    r = run([a.replace("{gpt2}", gpt2[0]) for a in args])
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("attnviz: error:")]
    assert len(errors) == 1 and message in errors[0]  # (transformers may print a loading bar before it)
