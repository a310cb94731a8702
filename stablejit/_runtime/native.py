"""The optional C accelerator (``stablejit/_speedups.c``), if it was built.

``NATIVE`` is the extension module, or None: not compiled (no compiler where
stablejit was installed), or ``$STABLEJIT_PURE_PYTHON=1``. Every use of it
has a pure-Python path that does the same; the accelerator only removes
Python frames from a redefined closure's hot path (see :mod:`.hot`).
"""

from __future__ import annotations

import os

try:
    if os.environ.get("STABLEJIT_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("$STABLEJIT_PURE_PYTHON is set")
    from .. import _speedups as NATIVE
except ImportError:
    NATIVE = None
