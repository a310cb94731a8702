"""The optional C accelerator (``stablejit/_speedups_c/``), if it was built.

``NATIVE`` is the extension module, or None: not compiled (no compiler where
stablejit was installed), ``$STABLEJIT_PURE_PYTHON=1``, or a free-threaded
CPython. Every use of it
has a pure-Python path that does the same; the accelerator only removes
Python frames from a redefined closure's hot path (see ``_runtime/hot.py``)
and checks plain objects in one pass (see ``_fingerprint/guards.py``).
"""

from __future__ import annotations

import os
import sys

try:
    if os.environ.get("STABLEJIT_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("$STABLEJIT_PURE_PYTHON is set")
    # A free-threaded CPython would turn its GIL back on to load a module that
    # does not declare itself free-thread safe, with a RuntimeWarning (an error
    # under -W error): there the pure-Python path runs.
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        raise ImportError("free-threaded CPython")
    from . import _speedups as NATIVE
except ImportError:
    NATIVE = None
