"""``python -m attnviz.training``: see attnviz/training/cli.py."""

from .cli import main

main()
