"""What the notebook explorer sends a page, per view, by text length: the widget's whole state (its script, labels,
the overview PNG, the open head or its blocks and window, token focus, the head links), the time to build it (one
pass over every head for the overview), and the time to answer a click on another head (what the kernel computes).

    python bench/notebook_payload.py
"""

import time

import common  # noqa: F401  (puts the repo root on sys.path: the bench runs from a clone, not an install)

import attnviz
from attnviz.data import CORPUS

LENGTHS = [16, 128, 512, 2048, 4096]


def main() -> None:
    text = CORPUS.read_text()
    print("| model | tokens | mode | state sent | build | another head |")
    print("|---|---|---|---|---|---|")
    for model in ("builtin:minilm", "builtin:seed"):
        backend = attnviz.load(model)
        for n in LENGTHS:
            if n > backend.limit():
                continue
            t = backend.trace(text * (1 + 8 * n // len(text)), max_tokens=n)
            start = time.perf_counter()
            w = attnviz.explorer(t, 2, 3)
            took = time.perf_counter() - start
            mode = "blocks + window" if w.info["long"] else "whole head"
            size = w.state_bytes()
            start = time.perf_counter()
            w.view = {**w.view, "layer": 1, "head": 0}
            click = time.perf_counter() - start
            print(f"| {model} | {t.n_tokens:,} | {mode} | {size / 2**20:.2f} MB | {took:.1f} s | {click:.2f} s |")


if __name__ == "__main__":
    main()
