"""What every benchmark shares: texts of an exact token count, timing, tables, JSON output, targets."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

# Huge pages for torch's large tensors, as app.py sets them (torch reads this at its first allocation: effective
# where this module is imported before torch).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import attnviz  # noqa: E402,F401
from attnviz.figures.explorer import DETAIL  # noqa: E402,F401  the long view's blocks a side

LENGTHS = (20, 128, 512)
MB = 1e6

# Plain English prose, so WordPiece splits it much as it would a user's paste; rotated to vary the text.
PASSAGE = (
    "The old lighthouse keeper climbed the narrow stairs every evening, counting the steps as his father "
    "had taught him. From the top he could see the harbour, the fishing boats coming home, and the long "
    "line of cliffs where the gulls nested in spring. When the fog rolled in from the sea, he lit the lamp "
    "early and wound the clockwork that turned the great lens. Ships far out in the dark saw the beam sweep "
    "across the water and changed their course, trusting a light they would never visit. In the winter of "
    "the storm, the keeper stayed awake for three nights, because the engine that turned the lens had broken "
    "and he turned it by hand. The town remembered him long after the light was automated, and children "
    "still ask why a man would spend his whole life looking after a lamp that nobody thanked him for. "
    "Scientists later measured the tower, mapped the currents near the rocks, and wrote reports about erosion, "
    "but the people who lived there preferred the stories: the ghost ship, the whale that sheltered in the "
    "bay, and the night the keeper's daughter rowed out alone to guide a lost trawler past the reef. "
)


def tokenizer():
    """MiniLM's WordPiece tokenizer, shared by builtin:minilm, builtin:seed and the HF model."""
    from transformers import AutoTokenizer

    from attnviz.backends.builtin import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


def text_of(tok, n_tokens: int, variant: int = 0) -> str:
    """A text that ``tok`` encodes to exactly ``n_tokens`` tokens ([CLS] and [SEP] included)."""
    words = PASSAGE.split()
    shift = (variant * 7) % len(words)
    source = " ".join((words[shift:] + words[:shift]) * (4 * n_tokens // len(words) + 2))
    offsets = tok(source, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    k = n_tokens - 2
    while k > 0:
        text = source[: offsets[k - 1][1]]
        got = len(tok(text)["input_ids"])
        if got == n_tokens:
            return text
        k += n_tokens - got  # a cut inside a word may re-tokenize differently: step and try again
    raise ValueError(f"could not make a text of {n_tokens} tokens")


def builtin_bare(net):
    """``ids -> None``: an attnviz net's forward at SDPA speed, keeping nothing: the path a trace takes
    (``nn.attention.attend`` under a recorder) with a recorder that drops what it is handed."""
    import torch

    from attnviz.capture.record import RECORDER

    class Discard:
        def items(self, B, Tq, Tk):  # every text whole (as attnviz.capture.record.Recorder.items for one text)
            return [None] * B

        def attention(self, module, layers, values=None):  # SDPA runs: nothing reduced
            pass

    def run(ids):
        token = RECORDER.set(Discard())
        try:
            with torch.inference_mode():
                net(ids)
        finally:
            RECORDER.reset(token)

    return run


def app_malloc() -> None:
    """Allocate as the app's server does: glibc's mmap threshold held at 64 KiB (``attnviz.ui.collect.start``), so
    every block above it is fresh memory, handed back when freed."""
    from attnviz.ui import collect  # glibc's setting only: collect imports no streamlit

    libc = collect._libc()
    if libc is not None:
        libc.mallopt(collect.M_MMAP_THRESHOLD, collect.MMAP_THRESHOLD)


def touch(mb: int) -> float:
    """Seconds to make and fill ``mb`` MB of 8 MB tensors, freed and handed back to the system after: memory the
    host backs again, free for the next allocation of any process for a moment (bench/cold_memory.py)."""
    import torch

    from attnviz.ui import collect

    t = time.perf_counter()
    xs = [torch.empty(8 * 2**20 // 4).fill_(1.0) for _ in range(mb // 8)]
    seconds = time.perf_counter() - t
    del xs
    libc = collect._libc()
    if libc is not None:  # under glibc's own threshold freed blocks may stay in this process's heap
        libc.malloc_trim(0)
    return seconds


def timeit(fn, repeat: int, warmup: int = 1) -> dict:
    """Median (and min, max) wall seconds of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    return compare({"fn": fn}, repeat, warmup)["fn"]


def clock():
    """BENCH_CLOCK=cpu times this process's CPU seconds instead of wall seconds: with BENCH_THREADS=1
    it is the one reading that other processes on a busy machine barely disturb."""
    return time.process_time if os.environ.get("BENCH_CLOCK", "") == "cpu" else time.perf_counter


def compare(fns: dict, repeat: int, warmup: int = 1) -> dict:
    """``timeit`` for several functions run in turn, so that load from other processes hits all alike;
    the order reverses every round, so none always runs after the same one. ``times_s`` keeps each round's
    time, for ``ratio``."""
    now = clock()
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for i in range(repeat):
        for name in list(fns)[:: 1 if i % 2 == 0 else -1]:
            t0 = now()
            fns[name]()
            times[name].append(now() - t0)
    return {
        name: {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t), "n": repeat, "times_s": t}
        for name, t in times.items()
    }


def ratio(a: dict, b: dict) -> float:
    """Median over rounds of a's time / b's time, from one ``compare``: the two ran side by side in each
    round, so a slow spell of the machine hits both parts of a ratio rather than one median."""
    return statistics.median(x / y for x, y in zip(a["times_s"], b["times_s"]))


def threads() -> int:
    """BENCH_THREADS sets torch's thread count (1 keeps a busy machine's numbers sane); default torch's."""
    import torch

    n = int(os.environ.get("BENCH_THREADS", "0") or 0)
    if n > 0:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.1f}"


def mb(n_bytes: float | None) -> str:
    return "—" if n_bytes is None else f"{n_bytes / MB:,.2f}"


def table(title: str, header: list[str], rows: list[list]) -> str:
    """A Markdown table (so the same text goes to the terminal and to RESULTS.md)."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    out = [f"\n### {title}\n", line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out)


def conditions() -> dict:
    """The machine and library versions the numbers were taken on."""
    import platform

    import torch
    import transformers

    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "torch_threads": threads(),
        "clock": "cpu" if clock() is time.process_time else "wall",
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def save(name: str, data) -> Path:
    """Write ``bench/out/<name>.json``."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=float))
    return path


def quick() -> bool:
    """BENCH_QUICK=1: fewer repeats, for checking that the scripts run."""
    return os.environ.get("BENCH_QUICK", "").strip() in ("1", "true", "yes")


def repeats(n_tokens: int) -> int:
    """Median-of-N counts: fewer at 512 tokens, where one run is long. Two torch threads on two shared cores
    make single runs vary by ±20%, so ratios near 1 need these many."""
    n = {20: 30, 128: 20, 512: 15}.get(n_tokens, 5)
    return max(2, n // 5) if quick() else n
