"""The command line: ``python -m attnviz models | trace | plot | generate | roles | atlas | corpus``.

Bad input (an empty text, a missing file, a layer out of range) gets one plain line on stderr and
exit status 2, as argparse does for bad arguments; a model that fails to run gets exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


class InputError(Exception):
    """Something the user can fix: printed as one line, exit status 2."""


TEXT_BYTES = 16 << 20  # the most a text file is read: past any model's token limit (32,768 tokens is ~150 KB of English)


def _read(source, name: str) -> str:
    """At most TEXT_BYTES from a binary stream, as UTF-8; a file, a pipe or /dev/zero alike."""
    data = source.read(TEXT_BYTES + 1)
    if len(data) > TEXT_BYTES:
        raise InputError(f"{name} holds more than {TEXT_BYTES >> 20} MB, more text than any model here takes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{name} is not UTF-8 text (byte {e.start:,})") from None


def _text(args) -> str:
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                return _read(f, repr(args.file))
        except OSError as e:
            raise InputError(f"cannot read {args.file!r}: {e.strerror or e}") from None
    return _read(sys.stdin.buffer, "standard input") if args.text == "-" else args.text


def _trace(args):
    import attnviz

    try:
        t = attnviz.trace(_text(args), model=args.model, target=args.target)
    except ValueError as e:
        raise InputError(str(e)) from None
    if t.truncated:
        print(f"attnviz: note: the text has {t.truncated:,} tokens more than {args.model} takes here; they were cut",
              file=sys.stderr)
    return t


def cmd_models(args) -> None:
    from attnviz import list_models

    if args.check:
        return _check(args.check)
    print("\n".join(list_models()))


def _check(key: str) -> None:
    """Trace one Hugging Face model and compare every head with its own eager weights: its support-matrix row."""
    from attnviz.backends.hf import check

    if not key.startswith("hf:"):
        raise InputError(f"--check takes a Hugging Face model, hf:<id or folder>, not {key!r}")
    try:
        row = check(key.removeprefix("hf:"))
    except ValueError as e:  # no such folder, an unreachable hub
        raise InputError(str(e)) from None
    print("| family | path | dtype | max difference from eager | refusal |\n|---|---|---|---|---|")
    print(row.row())
    if not row.exact:  # a model attnviz would show wrong weights for: a fault, exit status 1
        print(f"attnviz: error: {key} is traced {row.gap} from its own eager weights", file=sys.stderr)
        sys.exit(1)


def cmd_trace(args) -> None:
    from attnviz.export import to_npz

    out = Path(args.out)
    if out.suffix.lower() != ".npz":
        raise InputError(f"--out must name a .npz file, not {out.name!r}")
    data = to_npz(_trace(args))
    _write(out, lambda: out.write_bytes(data))
    print(f"wrote {out} ({len(data) / 1e6:.2f} MB)", file=sys.stderr)


def cmd_plot(args) -> None:
    from contextlib import nullcontext

    from attnviz.analysis.long import Reducer
    from attnviz.capture.record import reducing
    from attnviz.export import IMAGE_FORMATS, head_figures, write_figures
    from attnviz.figures.explorer import CELLS

    if Path(args.out).suffix.lower().lstrip(".") not in ("html", *IMAGE_FORMATS):
        raise InputError(f"--out must end in .html, {', '.join('.' + e for e in IMAGE_FORMATS)}, not {args.out!r}")
    backend = _backend(args)
    # A long text's pooled maps are read during the forward, as the Attention page reads them (analysis.long.traced).
    with nullcontext() if backend.kind == "encoder-decoder" else reducing(Reducer(CELLS, backend.n_layers)) as reducer:
        trace = _trace(args)
    try:
        figures = head_figures(trace, args.layer, args.head, args.stack, reducer)
    except ValueError as e:
        raise InputError(str(e)) from None
    _write(Path(args.out), lambda: write_figures(figures, args.out, offline=not args.cdn))
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB)", file=sys.stderr)


def _backend(args):
    from attnviz.backends import load

    try:
        return load(args.model)
    except ValueError as e:
        raise InputError(str(e)) from None


def cmd_generate(args) -> None:
    from attnviz.backends import check_text
    from attnviz.export import to_npz
    from attnviz.backends.generation import Sampling

    out = Path(args.out)
    if out.suffix.lower() != ".npz":
        raise InputError(f"--out must name a .npz file, not {out.name!r}")
    try:  # the arguments first: a model takes seconds to load
        s = Sampling(args.new_tokens, args.temperature, args.top_k, args.seed)
        prompt = check_text(_text(args))
    except ValueError as e:
        raise InputError(str(e)) from None
    backend = _backend(args)
    if not backend.can("generate"):
        raise InputError(f"{args.model} is not a causal language model: generation needs one (e.g. hf:gpt2)")
    try:
        g = backend.generate(prompt, s)
    except ValueError as e:
        raise InputError(str(e)) from None
    data = to_npz(g.trace, g.arrays())
    _write(out, lambda: out.write_bytes(data))
    print(g.continuation)
    print(f"wrote {out}: {g.prompt_len} prompt + {g.n_new} generated tokens ({len(data) / 1e6:.2f} MB)", file=sys.stderr)


def cmd_roles(args) -> None:
    from attnviz.analysis.roles import probe_trace, role_scores, role_table

    text = _text(args)
    backend = _backend(args)
    try:
        trace = backend.trace(text)
        if trace.kind == "encoder-decoder":
            raise InputError("roles are scored on one self-attention stack: use an encoder or a causal LM")
        probe = role_scores(probe_trace(backend)) if backend.can("token_ids") else None
    except ValueError as e:
        raise InputError(str(e)) from None
    table = role_table(role_scores(trace), probe)
    _write(Path(args.out), lambda: table.to_csv(args.out, index=False))
    print(f"wrote {args.out}: {len(table)} heads{'' if probe else ' (no probe: the model takes no token ids)'}",
          file=sys.stderr)


def cmd_atlas(args) -> None:
    import json

    import attnviz

    started = time.monotonic()

    def progress(done, total, what):
        print(f"attnviz: {what} ({time.monotonic() - started:.0f} s)", file=sys.stderr)

    try:
        backend = attnviz.load(args.model)
        frame = attnviz.head_atlas(backend, None if args.file is None else _text(args), tokens=args.tokens,
                                   needles=args.needles, seed=args.seed, progress=progress)
        check = (attnviz.atlas_knockout(backend, frame, args.knockout, args.seed, progress)
                 if args.knockout and frame.attrs["retrieval"] else None)
    except ValueError as e:
        raise InputError(str(e)) from None
    if args.json:
        meta = {k: v for k, v in frame.attrs.items() if k != "probes"}
        meta["probes"] = [{k: v for k, v in p.items() if k != "text"} for p in frame.attrs["probes"]]
        print(json.dumps({**meta, "heads": json.loads(frame.to_json(orient="records")),
                          "knockout": None if check is None else json.loads(check.table().to_json(orient="records"))}))
        return
    print(frame.to_string(index=False))
    if check is not None:
        print(check.table().to_string(index=False))


def cmd_corpus(args) -> None:
    from attnviz import corpus as cp
    from attnviz import settings

    out = Path(args.out)
    if out.suffix.lower() not in (".parquet", ".csv"):
        raise InputError(f"--out must name a .parquet or .csv file, not {out.name!r}")
    address = args.ray or settings.ray_address()
    started = time.monotonic()

    def progress(done):
        print(f"attnviz: {done:,} texts ({done / (time.monotonic() - started):.1f} texts/s)", file=sys.stderr)

    if args.input == "demo":  # the demo corpus that ships inside the package, found from any folder
        from attnviz.data import CORPUS

        args.input = str(CORPUS)
    try:
        source = cp.Corpus(args.input, args.column)
        stats = cp.run(args.model, source, out, args.column, args.limit, address, progress=progress,
                       note=lambda line: print(f"attnviz: {line}", file=sys.stderr))
        written = cp.write(stats, out, source, by=args.top_by, k=args.top)
    except ValueError as e:
        raise InputError(str(e)) from None
    except ImportError as e:
        raise InputError(f"--ray needs Ray ({e.name}): pip install -r requirements-ray.txt") from None
    except OSError as e:
        raise InputError(f"cannot write {str(out)!r}: {e.strerror or e}") from None
    print(f"wrote {' and '.join(map(str, written))}: {stats.n_texts:,} texts", file=sys.stderr)


def _write(path: Path, write) -> None:
    try:
        write()
    except ValueError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"cannot write {str(path)!r}: {e.strerror or e}") from None


def _prog() -> str:
    """How this command was run, for its usage lines: ``attnviz`` (the installed script) or ``python -m attnviz``."""
    return "python -m attnviz" if Path(sys.argv[0]).name == "__main__.py" else Path(sys.argv[0]).name or "attnviz"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=_prog(),
        description="Run text through a transformer and save what its attention heads do.",
        epilog="Models: the keys `models` lists, hf:<Hugging Face id or folder>, or a local folder.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{models,trace,plot,generate,roles,atlas,corpus}")
    models = sub.add_parser("models", help="list the built-in model keys")
    models.add_argument("--check", metavar="hf:<id or folder>",
                        help="trace this model, compare every head with its own eager attention, print its row")
    models.set_defaults(run=cmd_models)

    def text_command(name: str, help: str, model: str | None = "builtin:minilm", out: str = "") -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        if model:
            c.add_argument("--model", default=model, help=f"model key (default: {model})")
        else:
            c.add_argument("--model", required=True, help="a causal LM: builtin:lm, or hf:<id or folder>")
        src = c.add_mutually_exclusive_group(required=True)
        src.add_argument("--text", help="the text to run; - reads it from standard input")
        src.add_argument("--file", help="read the text from this UTF-8 file")
        if name in ("trace", "plot"):
            c.add_argument("--target", help="the decoder's text for encoder–decoder models (default: greedy output)")
        c.add_argument("--out", required=True, help=out or (".npz" if name == "trace" else ".html, .png, .svg or .pdf"))
        return c

    text_command("trace", "save the whole trace (attentions, hidden states, norms, tokens) as .npz"
                 ).set_defaults(run=cmd_trace)
    plot = text_command("plot", "save one head's attention heatmap as HTML or an image")
    plot.add_argument("--layer", type=int, default=0, help="layer index from 0 (default 0)")
    plot.add_argument("--head", type=int, default=0, help="head index from 0 (default 0)")
    plot.add_argument("--stack", choices=("encoder", "decoder", "cross"), default="encoder",
                      help="for encoder–decoder models: which attention to plot (default encoder)")
    plot.add_argument("--cdn", action="store_true",
                      help="HTML loads plotly.js from its CDN (~10 kB file) instead of inlining it (~4.8 MB, works offline)")
    plot.set_defaults(run=cmd_plot)
    gen = text_command("generate", "continue a prompt with a causal LM (builtin:lm, or hf:<id or folder>); print the continuation and save the trace "
                       "of prompt + continuation (.npz, with generation/* arrays: prompt_len, per-step top-5)",
                       model=None, out=".npz")
    gen.add_argument("--new-tokens", type=int, default=20, help="how many tokens to generate (default 20)")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 (the default): greedy; above 0: sampled")
    gen.add_argument("--top-k", type=int, default=0, help="sample from the k likeliest tokens only (0: all)")
    gen.add_argument("--seed", type=int, default=0, help="random seed for sampling (default 0)")
    gen.set_defaults(run=cmd_generate)
    text_command("roles", "score every head's roles (previous-token, induction, …) on the text and on the "
                 "repeated random-token probe; write them as CSV", out=".csv").set_defaults(run=cmd_roles)

    help = ("the long-context head atlas: retrieval, streaming, sink and sparse-pattern scores of every head on "
            "needle-in-a-haystack probes, each with its null, and the knock-out check")
    atlas = sub.add_parser("atlas", help=help, description=help)
    atlas.add_argument("model", help="model key (builtin:…, hf:<id or folder>)")
    atlas.add_argument("--tokens", type=int, default=2048, help="tokens of each probe (default 2048)")
    atlas.add_argument("--needles", type=int, default=3, help="probes, the needle at as many depths (default 3)")
    atlas.add_argument("--seed", type=int, default=0, help="random seed of the probes and nulls (default 0)")
    atlas.add_argument("--knockout", type=int, default=10, help="heads knocked out in the check (default 10; 0: none)")
    atlas.add_argument("--file", help="hide the needles in this UTF-8 document (default: bundled sentences)")
    atlas.add_argument("--json", action="store_true", help="print JSON (the heads, the probes, the check)")
    atlas.set_defaults(run=cmd_atlas, text=None)

    from attnviz.corpus import NAMES

    help = "every head's statistics over a corpus (distributions per head, top texts), resumable"
    corpus = sub.add_parser("corpus", help=help, description=help)
    corpus.add_argument("--model", default="builtin:minilm", help="model key (default: builtin:minilm)")
    corpus.add_argument("--input", required=True, help=".txt (a text per line, or blank-line separated), .csv, .jsonl "
                        "or .parquet; demo: the 400-sentence demo corpus that ships with attnviz")
    corpus.add_argument("--column", help="the text column of .csv/.jsonl/.parquet (default: text)")
    corpus.add_argument("--out", required=True, help="per-head table, .parquet or .csv; top texts go to <stem>.top<ext>, "
                        "finished shards to <out>.shards/ (a rerun skips them)")
    corpus.add_argument("--limit", type=int, help="only the first N texts")
    corpus.add_argument("--ray", metavar="auto|ADDRESS",
                        help="run on Ray (auto: a local or already started cluster); also ATTNVIZ_RAY_ADDRESS")
    corpus.add_argument("--top", type=int, default=5, help="texts kept per head at each end (default 5)")
    corpus.add_argument("--top-by", choices=NAMES, default="max", help="statistic that ranks them (default max)")
    corpus.set_defaults(run=cmd_corpus)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.run(args)
    except InputError as e:
        print(f"attnviz: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a fault in a model or library: one line, not a traceback
        print(f"attnviz: error: {args.command} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0
