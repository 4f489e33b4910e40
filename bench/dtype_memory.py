"""Memory by dtype: peak RSS of a fresh process that loads a decoder's checkpoint and traces 512 tokens, the
same Llama-shaped model saved as float32 and as bfloat16 (what most hub decoders ship).

A bf16 checkpoint traces in bf16: no float32 copy of its weights, queries and keys captured in bf16, heads
computed in float32. Run: ``python bench/dtype_memory.py``; each dtype runs in its own child process
(``--child FOLDER``). Writes bench/out/dtype_memory.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import conditions, mb, save, table
from memory import current

N_TOKENS = 512
# About 150 M parameters (12 layers, width 768, 12 heads over 4 key/value heads): weights dominate the peak.
SHAPE = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
             num_key_value_heads=4, max_position_embeddings=1024)


def peak() -> int:
    """This process's peak resident set so far, in bytes: VmHWM belongs to the process's own address space, which
    exec starts afresh (ru_maxrss would carry the parent's, which built the checkpoints, across fork)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def build(folder: Path, dtype: str) -> None:
    import torch
    import transformers as tf
    from common import tokenizer

    tok = tokenizer()
    config = tf.LlamaConfig(vocab_size=len(tok), bos_token_id=101, eos_token_id=102, pad_token_id=0, **SHAPE)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = tf.LlamaForCausalLM(config)
    net.to(getattr(torch, dtype)).save_pretrained(folder)
    tok.save_pretrained(folder)


def child(folder: str) -> dict:
    import attnviz
    from common import text_of, tokenizer

    text = text_of(tokenizer(), N_TOKENS)
    steps = {"imports": peak()}
    backend = attnviz.load(f"hf:{folder}")
    steps["loaded"] = peak()
    trace = backend.trace(text)
    steps["traced"] = peak()
    layer = trace.weights.layers[0]
    return {"dtype": str(backend.net.dtype).removeprefix("torch."), "tokens": trace.n_tokens,
            "parameters": sum(p.numel() for p in backend.net.parameters()),
            "weight_bytes": sum(p.numel() * p.element_size() for p in backend.net.parameters()),
            "qk_dtype": str(layer.q.dtype).removeprefix("torch."), "capture": trace.capture,
            "disk_bytes": sum(f.stat().st_size for f in Path(folder).glob("*.safetensors")),
            "peak_rss": steps, "rss_after": current()}


def run() -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("float32", "bfloat16"):
            folder = Path(tmp) / dtype
            build(folder, dtype)
            proc = subprocess.run([sys.executable, __file__, "--child", str(folder)], capture_output=True, text=True,
                                  timeout=900)
            if proc.returncode:
                rows.append({"dtype": dtype, "error": proc.stderr.strip().splitlines()[-1]})
                continue
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    result = {"conditions": conditions(), "rows": rows}
    save("dtype_memory", result)
    return result


def report(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        if "error" in r:
            rows.append([r["dtype"], *["—"] * 7, r["error"][:60]])
            continue
        p = r["peak_rss"]
        rows.append([r["dtype"], r["tokens"], f"{r['parameters'] / 1e6:.0f} M", mb(r["disk_bytes"]),
                     mb(r["weight_bytes"]), mb(p["imports"]), mb(p["loaded"]), mb(p["traced"]),
                     f"{r['qk_dtype']}, {r['capture']}"])
    return table(f"Peak RSS by checkpoint dtype, one fresh process each, {N_TOKENS} tokens (MB)", [
        "checkpoint", "tokens", "parameters", "on disk", "weights in memory", "peak after imports",
        "after loading", "after tracing", "queries/keys, path"], rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2])))
    else:
        print(report(run()))
