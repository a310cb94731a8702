"""The optional C accelerator (``stablejit/_speedups_c/``), if it was built and is current.

``NATIVE`` is the extension module, or None: not compiled (no compiler where
stablejit was installed), ``$STABLEJIT_PURE_PYTHON=1``, a free-threaded
CPython, or a build older than the C sources beside it (``_source_digest.py``).
Every use of it has a pure-Python path that does the same; the accelerator only
removes Python frames from a redefined closure's hot path (see
``_runtime/hot.py``) and checks plain objects in one pass (see
``_fingerprint/guards.py``).
"""

from __future__ import annotations

import logging
import os
import sys
from types import ModuleType

from ._source_digest import source_digest


def current(module: ModuleType) -> ModuleType | None:
    """``module`` if it was built from the C sources beside it (or none lie there), else None.

    A stale build is left unloaded with a log line, not an error: the pure-Python path is
    complete, and a build that reads another format than the Python side writes could fail.
    """
    sources = source_digest()
    built = getattr(module, "SOURCE_DIGEST", None)
    if sources is None or built == sources:
        return module
    logging.getLogger("stablejit").info(
        "stablejit: the C accelerator %s was built from other sources (digest %s, the sources "
        "%s); the pure-Python path runs. Rebuild it with `pip install -e . --no-deps`.",
        getattr(module, "__file__", module.__name__),
        built,
        sources,
    )
    return None


def _load() -> ModuleType | None:
    if os.environ.get("STABLEJIT_PURE_PYTHON", "") not in ("", "0"):
        return None
    # A free-threaded CPython would turn its GIL back on to load a module that
    # does not declare itself free-thread safe, with a RuntimeWarning (an error
    # under -W error): there the pure-Python path runs.
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return current(_speedups)


NATIVE = _load()
