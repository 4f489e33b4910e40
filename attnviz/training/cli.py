"""Train the built-in models from the command line.

    python -m attnviz.train classifier|translator|lm [--steps N --d-model D --out FOLDER]

writes ``FOLDER/<task>.safetensors`` and ``FOLDER/<task>.json`` (default: attnviz/checkpoints/). ``lm`` is
builtin:lm, the language model of ``attnviz.training.lm``. ``python -m attnviz.training`` is the same command.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from ..backends.lm import DESCRIPTION
from ..backends.trained import CHECKPOINTS, save_checkpoint
from .lm import LMConfig, train_lm
from .loop import DESCRIPTIONS, Progress, Trained, TrainConfig, train
from .tasks import TASKS


def _options(p: argparse.ArgumentParser, cls) -> None:
    """One --option per field of the dataclass ``cls``, with its default."""
    defaults = cls()
    for f in dataclasses.fields(cls):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(getattr(defaults, f.name)),
                       default=getattr(defaults, f.name))
    p.add_argument("--out", default=str(CHECKPOINTS), help="folder for the .safetensors and .json checkpoint")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads while training")


def main_lm(argv) -> object:
    """``python -m attnviz.train lm``: train builtin:lm with a progress bar, save lm.safetensors + lm.json."""
    from tqdm import tqdm

    p = argparse.ArgumentParser(prog="python -m attnviz.train lm", description=main_lm.__doc__)
    _options(p, LMConfig)
    args = vars(p.parse_args(argv))
    out, threads = args.pop("out"), args.pop("threads")
    config = LMConfig(**args)
    with tqdm(total=config.steps, unit="step", desc="lm") as bar:
        def show(p):
            bar.update(p.step - bar.n)
            bar.set_postfix(loss=f"{p.loss:.3f}", **({"induction": f"{p.induction:.2f}", "previous": f"{p.previous:.2f}"}
                                                     if p.induction is not None else {}))

        result = train_lm(config, show, key="builtin:lm", threads=threads)
    m = result.model
    m.description = DESCRIPTION.format(n_layers=m.n_layers, n_heads=m.n_heads, induction=result.induction)
    paths = save_checkpoint(m, os.path.join(out, "lm"))
    print(f"lm: induction {result.induction:.3f}, previous-token {result.previous:.3f} in {result.seconds:.0f} s -> "
          + ", ".join(f"{q} ({q.stat().st_size / 1e3:.0f} kB)" for q in paths))
    return result


def main(argv=None) -> Trained:
    """The CLI: train one task with a progress bar, save its checkpoint."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["lm"]:
        return main_lm(argv[1:])
    p = argparse.ArgumentParser(prog="python -m attnviz.train", description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=[*TASKS, "lm"])
    _options(p, TrainConfig)
    args = vars(p.parse_args(argv))
    task, out, threads = args.pop("task"), args.pop("out"), args.pop("threads")
    config = TrainConfig(**args)

    from tqdm import tqdm

    with tqdm(total=config.steps, unit="step", desc=task) as bar:
        def show(p: Progress):
            bar.update(p.step - bar.n)
            bar.set_postfix(loss=f"{p.loss:.3f}", acc=f"{p.accuracy:.2f}",
                            **({"held_out": f"{p.eval_accuracy:.3f}"} if p.eval_accuracy is not None else {}))

        result = train(task, config, show, key=f"builtin:{task}", threads=threads)
    m = result.model
    m.description = DESCRIPTIONS[task].format(n_layers=m.n_layers, n_heads=m.n_heads, acc=result.eval_accuracy)
    paths = save_checkpoint(m, os.path.join(out, task))
    print(f"{task}: held-out {result.eval_accuracy:.3f} in {result.seconds:.0f} s -> "
          + ", ".join(f"{q} ({q.stat().st_size / 1e3:.0f} kB)" for q in paths))
    return result


if __name__ == "__main__":
    main()
