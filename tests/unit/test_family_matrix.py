"""The support matrix: every text model type transformers knows, tiny and random, loaded the way a user loads a
folder, holds to exactly one of three outcomes — exact through the attention interface, exact through a visible
eager fallback (every head within the dtype's tolerance of the same folder loaded eager, outputs on), or refused
before tracing in words that name the family and the reason. The path each type takes is pinned in
family_paths.json, so a capture that breaks (a mask recipe dropped) turns its families red, not silently eager.

The run writes the matrix as a markdown table to tests/screenshots/family_matrix.md (docs/models.md).
Set ATTNVIZ_MATRIX_WRITE=1 to rewrite family_paths.json after a transformers upgrade, then read the diff.
"""

import json
import os
import re
import time
from pathlib import Path

import pytest
from families import VARIANTS, matrix, skipped_types, text_types

HERE = Path(__file__).parents[1]  # tests/
PATHS = HERE / "family_paths.json"
TABLE = HERE / "screenshots" / "family_matrix.md"
TYPES = text_types() + list(VARIANTS)
# Families the issue names: each traces exactly (interface or visible eager), never a refusal.
MUST_TRACE = ("opt", "opt-350m", "falcon", "falcon-alibi", "falcon-new", "gpt_neo", "albert", "bert", "gpt2",
              "llama", "mistral-window", "gemma2", "qwen2", "t5", "bart", "marian")
# Only voxtral_realtime_text is not built (its auto mapping names a class transformers 5.24 lacks); more means
# the shrink helper broke.
MAX_NOT_BUILT = 1


@pytest.fixture(scope="module")
def rows():
    start = time.perf_counter()
    found = {r["type"]: r for r in matrix(TYPES, workers=2)}
    seconds = time.perf_counter() - start
    _write_table(found, seconds)
    if os.environ.get("ATTNVIZ_MATRIX_WRITE") == "1":
        PATHS.write_text(json.dumps({t: r["path"] for t, r in sorted(found.items()) if r["built"]}, indent=1) + "\n")
    return found


def _write_table(found: dict, seconds: float) -> None:
    built = [r for r in found.values() if r["built"]]
    counts = {p: sum(r.get("path") == p for r in built) for p in ("interface", "eager", "refused")}
    lines = [f"{len(found)} text types and variants in {seconds:.0f} s: {counts['interface']} through the interface, "
             f"{counts['eager']} through visible eager, {counts['refused']} refused, "
             f"{len(found) - len(built)} not built tiny; {len(skipped_types())} non-text types skipped.", "",
             "| family | path | dtype | max difference from eager |", "|---|---|---|---|"]
    for r in sorted(built, key=lambda r: (r.get("path") == "refused", r["type"])):
        if r.get("path") != "refused":
            gap = "—" if r.get("gap") is None else f"{r['gap']:.1e}"
            lines.append(f"| {r['type']} | {r.get('path')} | {r.get('dtype', '')} | {gap} |")
    lines += ["", "| refused family | reason |", "|---|---|"]
    lines += [f"| {r['type']} | {_reason(r)} |" for r in sorted(built, key=lambda r: r["type"])
              if r.get("path") == "refused"]
    lines += ["", "| not built tiny | why |", "|---|---|"]
    lines += [f"| {r['type']} | {r['reason'].splitlines()[0][:160]} |" for r in found.values() if not r["built"]]
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _reason(r: dict) -> str:
    return r["reason"].split(" exactly: ", 1)[-1].rstrip(".").replace("|", "/")


@pytest.mark.parametrize("model_type", TYPES)
def test_every_text_family_is_exact_or_refused_in_words(rows, model_type):
    r = rows[model_type]
    if not r["built"]:
        pytest.skip(f"the shrink helper cannot make {model_type} tiny: {r['reason'][:200]}")
    family = VARIANTS.get(model_type, (model_type,))[0]
    assert r["path"] in ("interface", "eager", "refused"), r["reason"]
    if r["path"] == "refused":
        # The family, then a reason in words: no wrapped exception from inside the model's code.
        assert r["reason"].startswith(f"attnviz cannot trace {family} models exactly: "), r["reason"]
        assert "forward fails" not in r["reason"], r["reason"]
    else:
        assert r["exact"], f"{model_type} via {r['path']}: {r['gap']} from eager attention"
    pinned = json.loads(PATHS.read_text()) if PATHS.exists() else {}
    if model_type in pinned:
        assert r["path"] == pinned[model_type], f"{model_type} was {pinned[model_type]}, now {r['path']}: {r['reason']}"


def test_the_matrix_covers_a_hundred_families_and_the_named_ones_trace(rows):
    built = [r for r in rows.values() if r["built"]]
    assert len(built) >= 100 and len(rows) - len(built) <= MAX_NOT_BUILT, [r["type"] for r in rows.values()
                                                                             if not r["built"]]
    for t in MUST_TRACE:
        assert rows[t]["built"] and rows[t]["path"] in ("interface", "eager"), (t, rows[t])
    assert sum(r["path"] == "interface" for r in built) >= 100
    # Nothing that is not text reached the matrix; everything left out says why.
    assert not set(TYPES) & set(skipped_types()) and all(skipped_types().values())
    table = TABLE.read_text(encoding="utf-8")
    assert all(re.search(rf"^\| {re.escape(t)} \|", table, re.M) for t in TYPES)
