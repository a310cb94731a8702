"""Which source files belong to installed libraries.

Module-level functions of installed libraries (jax, numpy, the standard
library…) are keyed by identity; everything else is fingerprinted by
structure, so editing or monkeypatching user code is always seen.

A file is a library's if it lies

* in the standard library, or in a folder on ``sys.path`` named
  ``site-packages`` or ``dist-packages`` (where installers put packages); or
* in a top-level package or module of any other folder on ``sys.path`` that
  a distribution was installed into: the folder holds that distribution's
  ``*.dist-info``, whose ``RECORD`` lists the package (``pip install
  --target``, a machine image's JAX on ``PYTHONPATH``).

stablejit's own files count as a library's wherever they lie (a checkout on
``PYTHONPATH``, an editable install): its functions and memo tables are
machinery that user code reaches through ``jax.jit`` in patch mode, never
part of what a trace computes.

A project installed editable keeps its own files in the project, where no
``.dist-info`` lists them (setuptools leaves an ``.egg-info`` there, which
does not count), so they stay user code, as do files of a project run from
its folder.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import sysconfig

from .._registry import Memo

_LIBRARY_DIRS = tuple(
    sorted(
        {
            os.path.normcase(os.path.realpath(p))
            for name in ("stdlib", "platstdlib", "purelib", "platlib")
            if (p := sysconfig.get_paths().get(name))
        }
        | {
            os.path.normcase(os.path.realpath(p))
            for p in sys.path
            if p.rstrip("/").endswith(("site-packages", "dist-packages"))
        }
    )
)
_OWN_DIR = os.path.normcase(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
_LIBRARY_FILES = Memo(1 << 14)  # file name → is_library_file
_FOLDERS: dict[str, tuple[str, ...]] = {}  # sys.path entry → its normalised paths
_INSTALLED: dict[str, frozenset[str]] = {}  # folder → top-level names installed there


def is_library_file(filename: str) -> bool:
    """Whether code from ``filename`` belongs to an installed library."""
    lib = _LIBRARY_FILES.get(filename)
    if lib is None:
        if filename.startswith("<frozen"):
            lib = True
        elif filename.startswith("<"):
            lib = False
        else:
            real = os.path.normcase(os.path.realpath(filename))
            lib = any(
                real.startswith(d + os.sep) for d in (_OWN_DIR, *_LIBRARY_DIRS)
            ) or _installed({os.path.normcase(os.path.abspath(filename)), real})
        _LIBRARY_FILES.put(filename, lib)
    return lib


def _installed(paths: set[str]) -> bool:
    """Whether one of ``paths`` (one file's, as given and resolved) lies in
    a top-level package that a distribution installed into its folder on
    ``sys.path``."""
    for entry in list(sys.path):
        folders = _FOLDERS.get(entry) if isinstance(entry, str) else ()
        if folders is None:
            folders = _FOLDERS[entry] = tuple(
                {os.path.normcase(f(entry)) for f in (os.path.abspath, os.path.realpath)}
            )
        for folder in folders:
            for path in paths:
                if path.startswith(folder + os.sep):
                    top = path[len(folder) + 1 :].split(os.sep, 1)[0]
                    if top in _installed_in(folder):
                        return True
    return False


def _installed_in(folder: str) -> frozenset[str]:
    """The top-level names (``jax``, ``six.py``) that the non-editable
    distributions installed in ``folder`` put there."""
    names = _INSTALLED.get(folder)
    if names is None:
        try:
            with os.scandir(folder) as it:
                infos = [e.path for e in it if e.name.endswith(".dist-info") and e.is_dir()]
        except OSError:  # not a folder (a zip archive), or unreadable
            infos = []
        names = _INSTALLED[folder] = frozenset(n for info in infos for n in _top_names(info))
    return names


def _top_names(info: str) -> set[str]:
    if _editable(info):
        return set()
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8", newline="") as f:
            rows = [row[0] for row in csv.reader(f) if row]
    except (OSError, UnicodeDecodeError, csv.Error):
        rows = []
    names = {os.path.normcase(r.replace("\\", "/").split("/", 1)[0]) for r in rows}
    names.discard("..")  # scripts, installed next to the folder
    if not rows:  # no RECORD (an installer that wrote none): the importable names
        try:
            with open(os.path.join(info, "top_level.txt"), encoding="utf-8") as f:
                tops = [line.strip() for line in f if line.strip()]
        except (OSError, UnicodeDecodeError):
            tops = []
        names = {os.path.normcase(n) for t in tops for n in (t, t + ".py")}
    return names


def _editable(info: str) -> bool:
    """Whether the distribution of ``info`` is an editable install (PEP 610)."""
    try:
        with open(os.path.join(info, "direct_url.json"), encoding="utf-8") as f:
            return bool(json.load(f).get("dir_info", {}).get("editable"))
    except (OSError, ValueError, AttributeError):
        return False
