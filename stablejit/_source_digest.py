"""The digest of the C accelerator's sources, which tells a stale build from a current one.

An editable install (``pip install -e .``) compiles ``stablejit/_speedups.*.so`` once; a later
``git pull`` changes the Python side and the C sources but leaves that build in place. The two
sides share formats (a guard spec's items, for one), and an old build reading a new format
would raise where ``jax.jit`` works. So ``setup.py`` compiles this digest into the extension,
and ``_native.py`` loads the extension only where it still matches the sources beside it.
Installed wheels ship no C sources: there the build is the wheel's own, and is trusted.

Only the standard library: ``setup.py`` loads this file by its path, before stablejit exists.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "_speedups_c"


def source_digest(sources: Path = SOURCES) -> str | None:
    """The sources' digest (each file's name and bytes, in name order); None if there are none."""
    files = sorted(p for p in sources.glob("*") if p.suffix in (".c", ".h"))
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
