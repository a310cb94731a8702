"""``python -m compat``: the same as ``python compat/run.py``."""

from compat.cli import main

raise SystemExit(main())
