"""What every page sends for a text of 512, 4,096 and 16,384 tokens (issue 34's "≤ 2 MB on every page").

Each page runs in real Streamlit (AppTest) on builtin:seed with ``ATTNVIZ_MAX_DENSE_MB=1``, so a page that asks
for every weight at once fails here instead of reporting a number. The bytes are those of the page's plotly
specs and HTML blocks, as Streamlit sends them. The Attention page reads the whole text (BENCH_QUICK=1 leaves its
16,384-token run out: a minute of forward on two cores); every other page reads its first ATTNVIZ_PAGE_TOKENS.
"""

from __future__ import annotations

import os
import sys
import time

import common  # noqa: F401  (puts the repo root on sys.path)
from common import ROOT, conditions, save, table, text_of, tokenizer

PAGES = ["app.py", "pages/1_Attention.py", "pages/2_Positional.py", "pages/3_Norms.py", "pages/4_Analysis.py",
         "pages/6_Compare.py", "pages/7_Roles.py", "pages/8_Generate.py", "pages/11_Interventions.py",
         "pages/12_Faithfulness.py"]
LENGTHS = (512, 4096, 16384)
LIMIT = 2 * 2**20


def page_bytes(page: str, text: str) -> tuple[int, float, str]:
    """(bytes sent, seconds, trouble) of one fresh session of ``page`` on ``text``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import open_page

    t0 = time.perf_counter()
    at = open_page(page, timeout=900, model="builtin:seed", text=text)
    seconds = time.perf_counter() - t0
    trouble = "; ".join(str(e.value)[:80] for e in [*at.exception, *at.error])
    sent = sum(len(c.proto.spec) for c in at.get("plotly_chart")) + sum(len(h.proto.body) for h in at.get("html"))
    return sent, seconds, trouble


def run() -> dict:
    os.environ.update(ATTNVIZ_MAX_TOKENS="16384", ATTNVIZ_MAX_CHARS="400000", ATTNVIZ_MAX_DENSE_MB="1")
    tok, quick = tokenizer(), os.environ.get("BENCH_QUICK") == "1"
    rows = []
    for n in LENGTHS:
        text = text_of(tok, n)
        for page in PAGES:
            if quick and n == 16384 and page == "pages/1_Attention.py":
                continue
            sent, seconds, trouble = page_bytes(page, text)
            rows.append(dict(tokens=n, page=page, bytes=sent, seconds=seconds, trouble=trouble))
    return {"conditions": conditions(), "rows": rows}


def report(result: dict) -> str:
    rows = [[f"{r['tokens']:,}", r["page"], f"{r['bytes'] / 2**20:.2f}", f"{r['seconds']:.1f}",
             "error: " + r["trouble"] if r["trouble"] else ("yes" if r["bytes"] <= LIMIT else "NO")]
            for r in result["rows"]]
    return table("Every page's payload by text length, builtin:seed, ATTNVIZ_MAX_DENSE_MB=1 (MiB of plotly specs "
                 "and HTML; seconds for a fresh session)", ["tokens", "page", "MiB", "s", "≤ 2 MiB"], rows) \
        + f"\n{result['conditions']}"


if __name__ == "__main__":
    result = run()
    print(report(result))
    print("saved", save("page_payload", result))
    over = [r for r in result["rows"] if r["trouble"] or r["bytes"] > LIMIT]
    if over:
        print("MISS:", ", ".join(f"{r['page']} at {r['tokens']:,}" for r in over))
        sys.exit(1)
