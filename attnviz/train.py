"""``python -m attnviz.train``: kept for the commands users know; see attnviz/training/cli.py."""

from .training.loop import main

if __name__ == "__main__":
    main()
