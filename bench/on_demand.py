"""Attention on demand at length: the trace against the bare SDPA forward, memory against eager attention.

Run: ``python bench/on_demand.py``. Each measurement runs in a fresh child process (``--child NAME``), so one
never counts against another's memory. Models: MiniLM through the Hugging Face backend (512 tokens),
``builtin:seed`` (sinusoidal: any length) and a ~100M-parameter Llama-style decoder with grouped-query
attention and random weights, built here (4,096 and 16,384 tokens). Writes bench/out/on_demand.json.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import builtin_bare, clock, compare, conditions, mb, ms, quick, ratio, save, table, text_of, threads, tokenizer

LLAMA = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
             num_key_value_heads=4, max_position_embeddings=16384, tie_word_embeddings=True)
LONG = 4096
LONGEST = 16384


def peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def llama_folder() -> Path:
    """The Llama-style decoder (random weights, MiniLM's vocabulary), saved once under the temp folder."""
    import torch
    import transformers as tf

    folder = Path(tempfile.gettempdir()) / "attnviz-bench-llama-100m"
    if not (folder / "model.safetensors").exists():
        tok = tokenizer()
        tok.model_max_length = LONGEST
        config = tf.LlamaConfig(vocab_size=tok.vocab_size, **LLAMA)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            tf.LlamaForCausalLM(config).save_pretrained(folder)
        tok.save_pretrained(folder)
    return folder


def bare(key: str):
    """``ids -> None``: the model's forward alone at SDPA speed, keeping nothing (the reference)."""
    import torch
    import transformers as tf

    import attnviz

    if key.startswith("builtin:"):
        return builtin_bare(attnviz.load(key).net)
    auto = tf.AutoModelForCausalLM if "llama" in key else tf.AutoModel
    net = auto.from_pretrained(key.removeprefix("hf:"), attn_implementation="sdpa").eval()

    def run(ids):
        with torch.inference_mode():
            net(input_ids=ids)

    return run


def speed(key: str, n: int) -> dict:
    """trace / bare SDPA forward at ``n`` tokens; at length also pooled(256) and one head."""
    import torch

    import attnviz

    threads()
    backend = attnviz.load(key)
    text = text_of(tokenizer(), n)
    ids = torch.tensor([backend.tokenizer(text).input_ids])  # (1, n)
    forward = bare(key)
    reps = 2 if n > 1024 else (3 if quick() else 9)
    t = compare({"trace": lambda: backend.trace(text), "bare": lambda: forward(ids)}, reps)
    out = {"model": key, "tokens": int(ids.shape[1]), "trace_s": t["trace"]["median_s"],
           "bare_s": t["bare"]["median_s"], "ratio": ratio(t["trace"], t["bare"]), "repeats": reps}
    if n > 1024:
        trace = backend.trace(text)
        now = clock()
        t0 = now()
        trace.pooled(256)
        out["pooled_s"] = now() - t0
        out["pooled_ratio"] = out["pooled_s"] / out["bare_s"]
    return out


def memory(key: str, n: int, eager: bool) -> dict:
    """Peak RSS of loading ``key`` and then either tracing ``n`` tokens, or running eager attention with
    ``output_attentions`` (what every tool that returns the weights does)."""
    import torch

    import attnviz

    threads()
    text = text_of(tokenizer(), n)
    if eager:
        import transformers as tf

        net = tf.AutoModelForCausalLM.from_pretrained(key.removeprefix("hf:"), attn_implementation="eager").eval()
        ids = torch.tensor([tokenizer()(text).input_ids])
        loaded = peak()
        with torch.inference_mode():
            out = net(input_ids=ids, output_attentions=True, output_hidden_states=True)
        return {"tokens": int(ids.shape[1]), "loaded": loaded, "peak": peak(),
                "weights_bytes": sum(a.nelement() * a.element_size() for a in out.attentions)}
    backend = attnviz.load(key)
    loaded = peak()
    t0 = time.perf_counter()
    trace = backend.trace(text)
    traced = time.perf_counter() - t0
    result = {"tokens": trace.n_tokens, "loaded": loaded, "peak": peak(), "trace_nbytes": trace.nbytes,
              "trace_s": traced}
    now = clock()
    t0 = now()
    trace.head(trace.n_layers - 1, 0)
    result["head_s"] = now() - t0
    result["peak_with_head"] = peak()
    return result


def child(name: str, key: str, n: int) -> dict:
    return {"speed": lambda: speed(key, n), "trace_memory": lambda: memory(key, n, False),
            "eager_memory": lambda: memory(key, n, True)}[name]()


def spawn(name: str, key: str, n: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", name, key, str(n)], capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run() -> dict:
    from server import hf_key

    llama = f"hf:{llama_folder()}"
    speeds = [spawn("speed", hf_key(), 512), spawn("speed", "builtin:seed", LONG), spawn("speed", llama, LONG)]
    mem = {
        "llama 4096 eager": spawn("eager_memory", llama, LONG),
        "llama 4096 trace": spawn("trace_memory", llama, LONG),
        "llama 16384 trace": spawn("trace_memory", llama, LONGEST),
        "seed 16384 trace": spawn("trace_memory", "builtin:seed", LONGEST),
    }
    result = {"conditions": conditions(), "speed": speeds, "memory": mem}
    save("on_demand", result)
    return result


def report(result: dict) -> str:
    from server import short

    rows = [[short(r.get("model", "?")), r.get("tokens", "—"), ms(r.get("trace_s")), ms(r.get("bare_s")),
             f"{r['ratio']:.2f}×" if "ratio" in r else r.get("error", "—"), ms(r.get("pooled_s")),
             f"{r['pooled_ratio']:.2f}×" if "pooled_ratio" in r else "—"] for r in result["speed"]]
    out = [table("Trace against the bare SDPA forward (ms, median of rounds side by side)",
                 ["model", "tokens", "trace", "bare SDPA forward", "trace / bare", "pooled(256), every head",
                  "pooled / bare"], rows)]
    mem = result["memory"]
    eager = mem["llama 4096 eager"]
    eager_added = eager.get("peak", 0) - eager.get("loaded", 0)
    rows = []
    for name, r in mem.items():
        if "error" in r:
            rows.append([name, "—", "—", "—", "—", r["error"][:60]])
            continue
        added = r["peak"] - r["loaded"]
        share = f"{added / eager_added:.1%}" if "trace" in name and "4096" in name and eager_added > 0 else "—"
        rows.append([name, r["tokens"], mb(r["loaded"]), mb(added), share,
                     f"head in {r['head_s']:.2f} s" if "head_s" in r else f"weights {mb(r['weights_bytes'])} MB"])
    out.append(table("Peak RSS, one fresh process each (MB): tracing against eager attention with its weights",
                     ["run", "tokens", "after loading", "added by the run", "share of eager's addition",
                      "note"], rows))
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2], sys.argv[3], int(sys.argv[4])), default=float))
    else:
        print(report(run()))
