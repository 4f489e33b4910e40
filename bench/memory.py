"""Memory: peak RSS of a fresh process that loads a model and traces 512 tokens, and the trace's bytes.

Run: ``python bench/memory.py``. Each model runs in its own child process (``--child KEY T``), so one
model's memory never counts against another. Writes bench/out/memory.json.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from common import conditions, mb, save, table

N_TOKENS = 512


def peak() -> int:
    """This process's peak resident set so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current() -> int:
    """This process's resident set now, in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def child(key: str, n: int) -> dict:
    """Load ``key`` and trace ``n`` tokens here, noting the peak after each step."""
    import attnviz
    from common import text_of, tokenizer

    text = text_of(tokenizer(), n)
    steps = {"imports and tokenizer": peak()}
    backend = attnviz.load(key)
    steps["model loaded"] = peak()
    trace = backend.trace(text)
    steps["traced"] = peak()
    return {"model": key, "tokens": trace.n_tokens, "peak_rss": steps, "rss_after": current(),
            "trace_nbytes": trace.nbytes,
            "trace_parts": {"attentions": trace.weights.nbytes, "hidden_states": trace.hidden_states.nbytes,
                            "norms": sum(v.nbytes for v in trace.norms.values())}}


def run() -> dict:
    from server import hf_key

    rows = []
    for key in ("builtin:minilm", hf_key(), "builtin:seed"):
        proc = subprocess.run([sys.executable, __file__, "--child", key, str(N_TOKENS)],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode:
            rows.append({"model": key, "error": proc.stderr.strip().splitlines()[-1]})
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    result = {"conditions": conditions(), "rows": rows}
    save("memory", result)
    return result


def report(result: dict) -> str:
    from server import short

    rows = []
    for r in result["rows"]:
        if "error" in r:
            rows.append([short(r["model"]), *["—"] * 6, r["error"][:60]])
            continue
        p = r["peak_rss"]
        rows.append([short(r["model"]), r["tokens"], mb(p["imports and tokenizer"]), mb(p["model loaded"]),
                     mb(p["traced"]), mb(p["traced"] - p["model loaded"]), mb(r["trace_nbytes"]),
                     mb(r["trace_parts"]["attentions"])])
    return table(f"Memory, one fresh process per model, {N_TOKENS} tokens (MB)", [
        "model", "tokens", "peak RSS after imports", "after loading", "after tracing", "tracing adds",
        "trace bytes", "of which attention (queries and keys)"], rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
    else:
        print(report(run()))
