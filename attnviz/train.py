"""``python -m attnviz.train``: the training command users know, kept; see attnviz/training/cli.py."""

from .training.cli import main

if __name__ == "__main__":
    main()
