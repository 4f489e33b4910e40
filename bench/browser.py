"""Browser: seconds from submitting a text to the attention page's rendered overview and detail, in
headless Chromium against a real ``streamlit run app.py``; and bertviz 1.4.1's views opened from file.

Run: ``python bench/payload.py`` first (it writes bertviz's HTML), then ``python bench/browser.py``.
Writes bench/out/browser.json. Needs Debian's chromium (/usr/bin/chromium) and npm (for bertviz's
require.js, d3 and jQuery, which its HTML loads from a CDN that this machine cannot reach).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from common import LENGTHS, OUT, ROOT, conditions, ms, quick, save, table, text_of, tokenizer

sys.path.insert(0, str(ROOT / "tests"))
from conftest import CHROMIUM, CHROMIUM_ARGS, start_server  # noqa: E402
from payload import BROWSER_LENGTHS  # noqa: E402
from attnviz.ui.long import CELLS  # noqa: E402

TIMEOUT_MS = 180_000
VIEWPORT = {"width": 1400, "height": 1000}

# What each chart shows now, to tell the new text's figures from the old ones still on screen.
SIGNATURE = """() => {
  const img = document.querySelector('.st-key-overview_self .js-plotly-plot image');
  const gd = document.querySelector('.st-key-detail_self .js-plotly-plot');
  return [img ? img.getAttribute('href') || img.getAttribute('xlink:href') : null,
          gd && gd.data ? JSON.stringify(gd.data[0].y) : null];
}"""
# performance.now() once the overview shows an image other than ``old`` and is no longer stale.
OVERVIEW_READY = """(old) => {
  const c = document.querySelector('.st-key-overview_self');
  if (!c || c.closest('[data-stale="true"]')) return false;
  const img = c.querySelector('.js-plotly-plot .main-svg image');
  const href = img && (img.getAttribute('href') || img.getAttribute('xlink:href'));
  return href && href !== old ? performance.now() : false;
}"""
# performance.now() once the detail heatmap has n new rows drawn and is no longer stale.
DETAIL_READY = """([n, old]) => {
  const c = document.querySelector('.st-key-detail_self');
  if (!c || c.closest('[data-stale="true"]')) return false;
  const gd = c.querySelector('.js-plotly-plot');
  if (!gd || !gd.data || !gd.querySelector('.heatmaplayer image')) return false;
  const y = gd.data[0].y;
  return y.length === n && JSON.stringify(y) !== old ? performance.now() : false;
}"""
PAINTED = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"

# bertviz 1.4.1 loads these from cdnjs; served from npm's packages instead (jQuery 2.0.0 is not on npm).
BERTVIZ_JS = {
    "require.min.js": ("requirejs@2.3.6", "package/require.js"),
    "d3.min.js": ("d3@5.7.0", "package/dist/d3.min.js"),
    "jquery.min.js": ("jquery@2.1.4", "package/dist/jquery.min.js"),
}


def attnviz_times(browser, tok) -> dict:
    """Per length: seconds to the overview, to the detail, and to the next painted frame (median)."""
    threads = os.environ.get("BENCH_THREADS", "").strip()
    proc, url = start_server({"OMP_NUM_THREADS": threads} if threads else None)  # as the other benchmarks
    try:
        page = browser.new_context(viewport=VIEWPORT).new_page()
        page.goto(f"{url}/Attention")
        box = page.get_by_role("textbox", name="Text", exact=True)
        box.wait_for(timeout=TIMEOUT_MS)
        page.wait_for_function(OVERVIEW_READY, arg=None, polling=100, timeout=TIMEOUT_MS)  # the default text
        first = submit(page, box, text_of(tok, 20, variant=99), 20)
        out = {"first_run_with_model_load": first}
        for n in LENGTHS:
            runs = [submit(page, box, text_of(tok, n, variant=v + 1), n) for v in range(1 if quick() else 3)]
            out[n] = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}
            print(f"  attnviz {n}: overview {out[n]['overview_s']:.2f} s, detail {out[n]['detail_s']:.2f} s",
                  file=sys.stderr)
        page.screenshot(path=str(OUT / "browser_attnviz_512.png"))
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def submit(page, box, text: str, n: int) -> dict:
    """Type ``text``, press Ctrl+Enter, and time the page until both charts show it: past CELLS tokens the
    Attention page's long view (its mosaic, then its block map and window), as bench/long_browser.py times it."""
    if n > CELLS:
        from long_browser import submit_long  # it imports this module

        return submit_long(page, box, text)
    old_overview, old_detail = page.evaluate(SIGNATURE)
    box.fill(text)
    t0 = page.evaluate("performance.now()")
    box.press("Control+Enter")
    wait = dict(polling="raf", timeout=TIMEOUT_MS)
    t_overview = page.wait_for_function(OVERVIEW_READY, arg=old_overview, **wait).json_value()
    t_detail = page.wait_for_function(DETAIL_READY, arg=[n, old_detail], **wait).json_value()
    t_painted = page.evaluate(PAINTED)
    return {"overview_s": (t_overview - t0) / 1e3, "detail_s": (t_detail - t0) / 1e3,
            "painted_s": (t_painted - t0) / 1e3}


def bertviz_js() -> Path:
    """A folder with bertviz's three scripts, fetched once with ``npm pack`` into bench/out/js."""
    folder = OUT / "js"
    if all((folder / name).exists() for name in BERTVIZ_JS):
        return folder
    if not shutil.which("npm"):
        raise RuntimeError("npm is needed to fetch bertviz's scripts (require.js, d3, jQuery)")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (spec, member) in BERTVIZ_JS.items():
            subprocess.run(["npm", "pack", spec, "--pack-destination", tmp, "--silent"], check=True,
                           capture_output=True, timeout=120)
            tgz = next(Path(tmp).glob(spec.split("@")[0] + "-*.tgz"))
            with tarfile.open(tgz) as tar:
                (folder / name).write_bytes(tar.extractfile(member).read())
    return folder


def bertviz_times(browser) -> dict:
    """Per view and length: seconds from opening bertviz's HTML to its first drawn, painted frame."""
    js = bertviz_js()
    out = {}
    for n in BROWSER_LENGTHS:
        for view in ("head_view", "model_view"):
            path = OUT / f"bertviz_{view}_{n}.html"
            if not path.exists():
                raise SystemExit(f"{path} is missing: run python bench/payload.py first")
            context = browser.new_context(viewport=VIEWPORT)
            page = context.new_page()
            page.route(re.compile(r"^https?://"), lambda route: serve_cdn(route, js))
            t0 = time.perf_counter()
            page.goto(path.as_uri(), wait_until="commit", timeout=TIMEOUT_MS)
            page.wait_for_function("() => !!document.querySelector('#vis svg line')", polling="raf",
                                   timeout=TIMEOUT_MS)
            page.evaluate(PAINTED)
            seconds = time.perf_counter() - t0
            out.setdefault(n, {})[view] = {"drawn_s": seconds, "html_bytes": path.stat().st_size}
            print(f"  bertviz {view} {n}: {seconds:.2f} s", file=sys.stderr)
            if n == max(BROWSER_LENGTHS):
                page.screenshot(path=str(OUT / f"browser_bertviz_{view}_{n}.png"))
            context.close()
    return out



def serve_cdn(route, js: Path):
    name = route.request.url.rsplit("/", 1)[-1]
    if (js / name).exists():
        route.fulfill(path=str(js / name), content_type="application/javascript")
    else:
        route.abort()  # nothing else leaves the machine


def run() -> dict:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise SystemExit("the browser benchmark needs Debian's chromium: apt-get install chromium")
    tok = tokenizer()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            result = {"conditions": conditions(), "attnviz": attnviz_times(browser, tok),
                      "bertviz": bertviz_times(browser)}
        finally:
            browser.close()
    save("browser", result)
    return result


def report(result: dict) -> str:
    ours, theirs = result["attnviz"], result["bertviz"]
    rows = []
    for n in LENGTHS:
        r = ours.get(n) or ours.get(str(n))
        b = theirs.get(n) or theirs.get(str(n)) or {}
        rows.append([n, ms(r["overview_s"]), ms(r["detail_s"]), ms(r["painted_s"]),
                     ms(b.get("head_view", {}).get("drawn_s")), ms(b.get("model_view", {}).get("drawn_s"))])
    return table("Browser: ms from submitting the text to the drawn page (headless Chromium; past 256 tokens the "
                 "Attention page's long view: overview = its mosaic, detail = its block map and window)", [
        "tokens", "attnviz overview", "attnviz detail", "attnviz painted", "bertviz head view",
        "bertviz model view"], rows)


if __name__ == "__main__":
    print(report(run()))
