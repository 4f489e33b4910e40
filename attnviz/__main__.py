"""``python -m attnviz``: see attnviz/cli.py."""

from .cli import main

raise SystemExit(main())
