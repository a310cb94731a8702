"""``python compat/run.py [--quick] [--env NAME] [--only A,B] [--modes M,N] [--jobs N]``.

Run as a script, the repository root is not on sys.path: put it there so
``compat`` imports as a package.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
