"""Issue 14's numbers, in headless Chromium against a real ``streamlit run app.py``, side by side in one run:

- 20 / 128 / 512 tokens (MiniLM, the default model): submit → overview drawn on the Attention page (cell by cell up
  to 256 tokens, pooled past it: at 512 the overview and the detail), against bertviz 1.4.1's head view and model
  view of the same model and text (its HTML opened from file, as bench/browser.py does; bertviz "cannot" where its
  HTML is too big to open: 869 MB at 512).
- 4,096 and 16,384 tokens of ``builtin:seed`` on the Attention page, a fresh server per length: submit → overview
  and detail (block map and exact window) drawn; the bare forward at the same length, timed in this process
  before the server starts and after it stops (the median of both); the bytes the server sent over the websocket
  for the submit; a zoom to a 256-token window (typing its first token into "Window from token") timed to the
  window drawn; and the server's peak RSS (VmHWM) beside what HF eager with attentions would need (L·H·T²·4
  bytes plus the model's weights).

Run: ``python bench/long_browser.py``. Writes bench/out/long_browser.json. Needs Debian's chromium and npm (see
bench/browser.py). BENCH_QUICK=1 runs each small length once; BENCH_LONG=4096 limits the long lengths;
BENCH_ROUNDS=3 runs each long length three times (medians, and each run, in the JSON); BENCH_SMALL_ROUNDS=9 runs the
small lengths nine times instead of three. BENCH_WARM_MB=600, a diagnosis and never the verdict's run: this process
touches and frees that many MB right before each long submit, so the server and the browser find memory the host
still backs (this VM hands memory idle for a few seconds back to its host, and faulting it in again costs ~1.1 ms a
MB: bench/cold_memory.py).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import quote

from browser import CHROMIUM, CHROMIUM_ARGS, PAINTED, TIMEOUT_MS, VIEWPORT, bertviz_js, serve_cdn, start_server
from browser import submit as submit_attention
from browser import OVERVIEW_READY as ATTENTION_READY
from common import LENGTHS, MB, OUT, builtin_bare, conditions, mb, ms, quick, save, table, text_of, tokenizer, touch
from payload import HTML_PAGE

from attnviz.ui.long import CELLS

LONG = tuple(int(n) for n in os.environ.get("BENCH_LONG", "4096,16384").split(",") if n.strip())
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1"))  # fresh servers per long length: the medians are reported
BERTVIZ_OPENS = (20, 128)  # bertviz's HTML at 512 tokens is 869 MB in either view: no browser opens it
LONG_TIMEOUT_MS = 1_800_000
WINDOW = 256
SERVER_ENV = {"ATTNVIZ_MAX_TOKENS": "16384", "ATTNVIZ_MAX_CHARS": "200000",
              "ATTNVIZ_WARM_MB": "512"}  # the reserve every round since 18 measured with (off by default)
WARM = 300  # tokens of the text a long view's tab opens with (the Attention page pools a text over CELLS tokens)
WARM_MB = int(os.environ.get("BENCH_WARM_MB", "0"))  # memory touched right before a long submit (a diagnosis)

# The image a chart on the Attention page's long view draws (the mosaic is a go.Image, the heatmaps draw one image each).
IMAGE = """(key) => {
  const c = document.querySelector('.st-key-' + key);
  const img = c && c.querySelector('.js-plotly-plot image');
  return img ? (img.getAttribute('href') || img.getAttribute('xlink:href')) : null;
}"""
# Whether chart ``key`` is no longer stale and draws an image other than ``old``: the one test DRAWN and WATCH make.
NEW_IMAGE = f"""(key, old) => {{
  const c = document.querySelector('.st-key-' + key);
  const href = c && !c.closest('[data-stale="true"]') && ({IMAGE})(key);
  return !!href && href !== old;
}}"""
# performance.now() once every chart in ``keys`` draws an image other than its old one and is no longer stale.
DRAWN = f"""([keys, old]) => keys.every((key, i) => ({NEW_IMAGE})(key, old[i])) && performance.now()"""
# A submit's clock, kept by the page: for each chart in ``keys``, the animation frame that first draws an image other
# than its old one, no longer stale (``drawn``), and the frame after it (``painted``), noted by a MutationObserver.
# Polling the page instead cost the page what it measured: every 50 ms, a poll took CPU from the server on this
# 2-core machine and saw a chart only when it ran, behind the drawing of the sections below (up to 0.2 s late);
# every frame, it kept the page drawing ~60 frames a second through the forward.
WATCH = f"""([keys, old]) => {{
  if (window.__watch) window.__watch.disconnect();
  const drawn = window.__drawn = {{}}, painted = window.__painted = {{}}, isNew = {NEW_IMAGE};
  const check = () => keys.forEach((key, i) => {{
    if (key in drawn || !isNew(key, old[i])) return;
    drawn[key] = null;
    requestAnimationFrame(t => {{ drawn[key] = t; requestAnimationFrame(u => {{ painted[key] = u; }}); }});
  }});
  window.__watch = new MutationObserver(check);
  window.__watch.observe(document, {{subtree: true, childList: true, attributes: true}});
}}"""
# [drawn, painted] of each chart in ``keys`` once every one is painted, else false.
SEEN = """(keys) => keys.every(k => k in window.__painted) && [keys.map(k => window.__drawn[k]), keys.map(k => window.__painted[k])]"""
# performance.now() once the exact window starts at ``start``, has ``n`` tokens and is no longer stale.
WINDOW_DRAWN = """([start, n]) => {
  const gd = document.querySelector('.st-key-long_window .js-plotly-plot');
  if (!gd || !gd.data || gd.closest('[data-stale="true"]') || !gd.querySelector('.heatmaplayer image')) return false;
  const x = gd.data[0].x, xs = (x && x._inputArray) ? x._inputArray : x;
  return xs.length === n && xs[0] === start ? performance.now() : false;
}"""
IDLE = """() => !document.querySelector('[data-stale="true"]')
  && !(document.querySelector('[data-testid="stStatusWidget"]') || {textContent: ''}).textContent.includes('Running')"""
OVERVIEW, DETAIL = ["long_overview"], ["long_blocks", "long_window"]


class Bytes:
    """Bytes the server sends the page over its websocket (Streamlit's forward messages)."""

    def __init__(self, page):
        self.n = 0
        self.last = time.perf_counter()
        page.on("websocket", lambda ws: ws.on("framereceived", self.add))

    def add(self, payload):
        self.n += len(payload)
        self.last = time.perf_counter()

    def quiet(self, page, seconds: float = 1.5, timeout: float = 600) -> int:
        """Wait until the page is idle and no frame came for ``seconds``; the bytes so far."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            page.wait_for_timeout(250)
            if time.perf_counter() - self.last >= seconds and page.evaluate(IDLE):
                return self.n
        raise TimeoutError("the page never went quiet")


def submit_long(page, box, text: str, timeout: int = TIMEOUT_MS, detail: bool = True) -> dict:
    """Type ``text`` into the Attention page (its long view), press Ctrl+Enter: seconds until the overview (and the
    detail) show it, and until the frame after that, on the page's own clock (WATCH)."""
    page.bring_to_front()
    keys = OVERVIEW + (DETAIL if detail else [])
    old = [page.evaluate(IMAGE, k) for k in keys]
    box.fill(text)
    page.evaluate(WATCH, [keys, old])
    t0 = page.evaluate("performance.now()")
    box.press("Control+Enter")
    try:
        drawn, painted = page.wait_for_function(SEEN, arg=keys, polling=250, timeout=timeout).json_value()
    except Exception:
        page.screenshot(path=str(OUT / "long_browser_failed.png"), full_page=True)
        print("  failed; now:", [str(page.evaluate(IMAGE, k))[-40:] for k in keys], "before:",
              [str(h)[-40:] for h in old], "stale:", page.evaluate("document.querySelectorAll('[data-stale=true]').length"),
              file=sys.stderr)
        raise
    out = {"overview_s": (drawn[0] - t0) / 1e3}
    if detail:
        out["detail_s"] = (max(drawn) - t0) / 1e3
        out["painted_s"] = (max(painted) - t0) / 1e3
    return out


def open_page(browser, url: str, ready: str, arg=None, timeout: int = TIMEOUT_MS, listen=None):
    page = browser.new_context(viewport=VIEWPORT).new_page()
    if listen is not None:
        listen(page)  # before the page opens its websocket
    page.goto(url, timeout=timeout)
    box = page.get_by_role("textbox", name="Text", exact=True)
    box.wait_for(timeout=timeout)
    page.wait_for_function(ready, arg=arg, polling=200, timeout=timeout)  # the default text, drawn
    return page, box


def bertviz_html(tok) -> None:
    """bertviz's head and model views of MiniLM at BERTVIZ_OPENS, written for the browser (as bench/payload.py)."""
    import torch
    from bertviz import head_view, model_view
    from transformers import AutoModel

    from attnviz.backends.builtin import minilm_path

    model = AutoModel.from_pretrained(minilm_path(), attn_implementation="eager").eval()
    for n in BERTVIZ_OPENS:
        ids = torch.tensor([tok(text_of(tok, n, variant=1))["input_ids"]])
        with torch.inference_mode():
            attn = model(input_ids=ids, output_attentions=True).attentions
        assert len(attn) == model.config.num_hidden_layers
        tokens = tok.convert_ids_to_tokens(ids[0])
        for name, view in (("head_view", head_view), ("model_view", model_view)):
            html = view(attn, tokens, html_action="return").data
            (OUT / f"bertviz_{name}_{n}.html").write_text(HTML_PAGE.format(view=name, body=html))
    del model
    gc.collect()


def bertviz_open(browser, js: Path, view: str, n: int) -> float:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.route(__import__("re").compile(r"^https?://"), lambda route: serve_cdn(route, js))
    t0 = time.perf_counter()
    page.goto((OUT / f"bertviz_{view}_{n}.html").as_uri(), wait_until="commit", timeout=TIMEOUT_MS)
    page.wait_for_function("() => !!document.querySelector('#vis svg line')", polling="raf", timeout=TIMEOUT_MS)
    page.evaluate(PAINTED)
    seconds = time.perf_counter() - t0
    context.close()
    return seconds


def small(browser, peer, tok) -> dict:
    """Per length: median seconds to the Attention page's overview (and past CELLS tokens its detail) and bertviz's
    views drawn, in interleaved rounds (the order alternates every round). Two tabs on the Attention page: one
    for the cell-by-cell view, one for the long view."""
    bertviz_html(tok)
    js = bertviz_js()
    proc, url = start_server(SERVER_ENV)
    try:
        long_page, long_box = open_page(browser, f"{url}/Attention?text={quote(text_of(tok, WARM, variant=97))}",
                                        DRAWN, [OVERVIEW + DETAIL, [None] * 3])
        att_page, att_box = open_page(browser, f"{url}/Attention", ATTENTION_READY)
        submit_long(long_page, long_box, text_of(tok, WARM, variant=99))  # warm both views' paths
        submit_attention(att_page, att_box, text_of(tok, 20, variant=98), 20)
        runs: dict = {}
        rounds = int(os.environ.get("BENCH_SMALL_ROUNDS") or (1 if quick() else 3))
        for r in range(rounds):
            for n in LENGTHS:
                text = text_of(tok, n, variant=1 + r)  # bertviz's HTML was written from variant 1
                jobs = {"attention": (lambda: submit_long(long_page, long_box, text)) if n > CELLS else
                        (lambda: att_page.bring_to_front() or submit_attention(att_page, att_box, text, n))}
                if n in BERTVIZ_OPENS:
                    jobs["head_view"] = lambda: {"drawn_s": bertviz_open(peer, js, "head_view", n)}
                    if r == 0:  # one run: 40–100 s at 128 tokens
                        jobs["model_view"] = lambda: {"drawn_s": bertviz_open(peer, js, "model_view", n)}
                for name in list(jobs)[:: 1 if r % 2 == 0 else -1]:
                    runs.setdefault(n, {}).setdefault(name, []).append(jobs[name]())
                print(f"  round {r} {n}: " + ", ".join(f"{k} {v[-1].get('overview_s', v[-1].get('drawn_s')):.2f} s"
                                                      for k, v in runs[n].items()), file=sys.stderr)
        long_page.screenshot(path=str(OUT / "long_browser_512.png"), full_page=True)
        return {n: {name: {k: statistics.median(x[k] for x in xs) for k in xs[0]} | {"n": len(xs)}
                    for name, xs in per.items()} for n, per in runs.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def hwm(pid: int) -> dict:
    """The server's peak and current resident memory, bytes (/proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmHWM", "VmRSS")}


def long_one(browser, tok, n: int) -> dict:
    """One length on a fresh server: submit → drawn, bytes, zoom, peak RSS; the bare forward here before the server
    starts and after it stops (this VM's speed drifts by a third within minutes: the median of both is the goal's)."""
    bare = bare_forward(tok, n)
    proc, url = start_server(SERVER_ENV)
    try:
        listened = []
        page, box = open_page(browser, f"{url}/Attention?model=builtin%3Aseed&text={quote(text_of(tok, WARM, 97))}", DRAWN,
                              [OVERVIEW + DETAIL, [None] * 3], LONG_TIMEOUT_MS, lambda pg: listened.append(Bytes(pg)))
        sent = listened[0]
        sent.quiet(page)
        page.wait_for_timeout(500)
        before = hwm(proc.pid)
        text = text_of(tok, n)
        if WARM_MB:
            touch(WARM_MB)
        sent.n = 0
        out = submit_long(page, box, text, LONG_TIMEOUT_MS)
        out["drawn_bytes"] = sent.n  # what had come when the overview and detail were drawn
        out["page_bytes"] = sent.quiet(page)  # the whole page's update
        page.locator(".gtitle", has_text=f"over {n:,} tokens").first.wait_for(timeout=10_000)
        # The zoom: the window's size set to 256 first (not timed), then its first token typed: one rerun, timed.
        size = page.get_by_role("spinbutton", name="Window size", exact=True)
        size.fill(str(WINDOW))
        size.press("Enter")
        page.wait_for_function(WINDOW_DRAWN, arg=[0, WINDOW], polling="raf", timeout=LONG_TIMEOUT_MS)
        sent.quiet(page)
        zooms = []
        for start in (n // 2, n // 4, 3 * n // 4):
            field = page.get_by_role("spinbutton", name="Window from token", exact=True)
            field.fill(str(start))
            sent.n = 0
            t0 = page.evaluate("performance.now()")
            field.press("Enter")
            t = page.wait_for_function(WINDOW_DRAWN, arg=[start, WINDOW], polling="raf",
                                       timeout=LONG_TIMEOUT_MS).json_value()
            zooms.append({"zoom_s": (t - t0) / 1e3, "zoom_bytes": sent.quiet(page)})
        out["zoom_s"] = statistics.median(z["zoom_s"] for z in zooms)
        out["zoom_bytes"] = statistics.median(z["zoom_bytes"] for z in zooms)
        out["zooms"] = zooms
        page.screenshot(path=str(OUT / f"long_browser_{n}.png"), full_page=True)
        out["rss_before"] = before["VmRSS"]
        out["peak_rss"] = hwm(proc.pid)["VmHWM"]
        page.context.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    after = bare_forward(tok, n)
    out |= after | {"forward_s": statistics.median(bare["walls"] + after["walls"]),
                    "forward_before_s": bare["forward_s"], "forward_after_s": after["forward_s"]}
    print(f"  {n}: overview {out['overview_s']:.1f} s, detail {out['detail_s']:.1f} s, forward "
          f"{out['forward_s']:.1f} s, zoom {out['zoom_s']:.2f} s, page {mb(out['page_bytes'])} MB, "
          f"peak RSS {mb(out['peak_rss'])} MB", file=sys.stderr)
    return out


def bare_forward(tok, n: int) -> dict:
    """builtin:seed's bare forward at ``n`` tokens (median wall and CPU seconds of 3, after one warm-up), and what
    HF eager with output_attentions would hold."""
    import torch

    import attnviz

    model = attnviz.load("builtin:seed")
    run = builtin_bare(model.net)
    ids = torch.tensor([model.tokenizer(text_of(tok, n)).input_ids[:n]])
    run(ids)
    wall, cpu = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        run(ids)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    L, H = shape(model)
    weights = sum(p.numel() * p.element_size() for p in model.net.parameters())
    del model, run
    gc.collect()
    return {"tokens": int(ids.shape[1]), "forward_s": statistics.median(wall), "walls": wall,
            "forward_cpu_s": statistics.median(cpu),
            "layers": L, "heads": H, "model_bytes": weights, "eager_bytes": L * H * n * n * 4 + weights}


def medians(runs: list[dict]) -> dict:
    """Each number's median over ``runs`` (the first run's value for anything else)."""
    return {k: statistics.median(r[k] for r in runs) if isinstance(v, (int, float)) else v for k, v in runs[0].items()}


def shape(model) -> tuple[int, int]:
    t = model.trace("a b", max_tokens=8)
    return t.n_layers, t.n_heads


def run() -> dict:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise SystemExit("this benchmark needs Debian's chromium: apt-get install chromium")
    OUT.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    result = {"conditions": conditions(), "warm_mb": WARM_MB}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            if os.environ.get("BENCH_SMALL", "1") != "0":
                peer = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)  # bertviz's own browser
                try:
                    result["small"] = small(browser, peer, tok)
                finally:
                    peer.close()
                result["conditions_small_done"] = conditions()
            result["long"] = {}
            for n in LONG:
                runs = [long_one(browser, tok, n) | {"load_avg_1m": round(os.getloadavg()[0], 2)} for _ in range(ROUNDS)]
                result["long"][n] = medians(runs) | ({"runs": runs} if len(runs) > 1 else {})
                save("long_browser", result)
        finally:
            browser.close()
    result["conditions_end"] = conditions()
    save("long_browser", result)
    return result


def report(result: dict) -> str:
    out = ""
    if "small" in result:
        rows = []
        for n, r in result["small"].items():
            get = lambda name, k="drawn_s": ms(r[name][k]) if name in r else "cannot (869 MB of HTML)"  # noqa: E731
            rows.append([n, ms(r["attention"]["overview_s"]), ms(r["attention"]["detail_s"]),
                         get("head_view"), get("model_view")])
        out += table(f"Browser, MiniLM: ms from submit to drawn, Attention page (cell by cell up to {CELLS} tokens, the "
                     "block map and window past it; median of rounds; bertviz: opening its HTML)",
                     ["tokens", "overview", "detail", "bertviz head view", "bertviz model view"], rows)
    rows = []
    for n, r in result.get("long", {}).items():
        rows.append([f"{int(n):,}", f"{r['overview_s']:.2f}", f"{r['detail_s']:.2f}", f"{r['forward_s']:.2f}",
                     f"{1.5 * r['forward_s'] + 1:.2f}", mb(r["page_bytes"]), f"{r['zoom_s']:.2f}",
                     mb(r["zoom_bytes"]), mb(r["peak_rss"]), mb(r["eager_bytes"]), r["load_avg_1m"]])
    warmed = f"; {result['warm_mb']} MB touched right before each submit (a diagnosis)" if result.get("warm_mb") else ""
    out += table(f"Attention page past 256 tokens, builtin:seed, fresh server per length (s; MB{warmed})",
                 ["tokens", "overview drawn", "overview + detail drawn", "bare forward", "1.5× forward + 1 s",
                  "websocket bytes", "zoom to 256 drawn", "zoom bytes", "server peak RSS", "HF eager would hold",
                  "load 1m"], rows)
    return out


if __name__ == "__main__":
    print(report(run()))
