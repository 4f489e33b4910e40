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


SCORES = {"eval_accuracy": "held-out", "induction": "induction", "previous": "previous-token"}  # printed names


def main(argv=None) -> Trained:
    """The CLI: train one task (or the language model) with a progress bar, save its checkpoint."""
    argv = sys.argv[1:] if argv is None else list(argv)
    lm = argv[:1] == ["lm"]
    p = argparse.ArgumentParser(prog="python -m attnviz.train", description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=[*TASKS, "lm"])
    _options(p, LMConfig if lm else TrainConfig)
    args = vars(p.parse_args(argv))
    task, out, threads = args.pop("task"), args.pop("out"), args.pop("threads")
    config = (LMConfig if lm else TrainConfig)(**args)

    from tqdm import tqdm

    with tqdm(total=config.steps, unit="step", desc=task) as bar:
        def show(p: Progress):
            bar.update(p.step - bar.n)
            bar.set_postfix(loss=f"{p.loss:.3f}", acc=f"{p.accuracy:.2f}",
                            **{SCORES[k]: f"{v:.3f}" for k, v in p.scores.items() if v is not None})

        key = f"builtin:{task}"
        result = (train_lm(config, show, key, threads) if lm else train(task, config, show, key, threads))
    m = result.model
    m.description = (DESCRIPTION if lm else DESCRIPTIONS[task]).format(n_layers=m.n_layers, n_heads=m.n_heads,
                                                                        **result.scores)
    paths = save_checkpoint(m, os.path.join(out, task))
    print(f"{task}: " + ", ".join(f"{SCORES[k]} {v:.3f}" for k, v in result.scores.items())
          + f" in {result.seconds:.0f} s -> " + ", ".join(f"{q} ({q.stat().st_size / 1e3:.0f} kB)" for q in paths))
    return result


if __name__ == "__main__":
    main()
