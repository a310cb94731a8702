"""Patch mode: route ``jax.jit`` and ``jax.lax``'s loops through stablejit.

For code we cannot edit (HuggingFace generation, optax linesearches) that
looks these functions up at call time (``jax.jit(...)``, ``lax.while_loop(...)``).
The originals are captured at import, before any patching (see
:mod:`._originals`), and stablejit itself always calls those. The patched
loops cache only at the top level: inside a transformation they call the
originals as given (see :mod:`._route`), so JAX sees stock's program.
"""

from __future__ import annotations

import threading

import jax
from jax import lax

from . import _loops
from ._originals import JIT, LAX, LAX_NAMES
from ._runtime.api import stable_jit

_LOCK = threading.Lock()
_DEPTH = 0


class patch:  # noqa: N801 - a function to call, which also works as a context manager
    """Routes ``jax.jit`` and ``jax.lax.{while_loop, fori_loop, scan, cond,
    switch, map}`` through stablejit until :func:`unpatch` (or the end of a
    ``with`` block, also on exceptions).

    Reaches code that looks these names up when it runs: ``jax.jit(f)``,
    ``lax.while_loop(...)``, ``jax.lax.scan(...)``. Does not reach code that
    bound them earlier (``from jax.lax import while_loop`` at import time,
    a ``@jax.jit`` decorator that already ran), nor JAX's own internals,
    which call the functions in ``jax._src``. Patching nests: each ``patch()``
    needs its ``unpatch()``.

    Example:
        >>> import jax, stablejit
        >>> with stablejit.patch():
        ...     assert jax.jit is stablejit.stable_jit
        >>> jax.jit is stablejit.stable_jit
        False
    """

    def __init__(self):
        global _DEPTH
        with _LOCK:
            _DEPTH += 1
            if _DEPTH == 1:
                jax.jit = stable_jit
                for name in LAX_NAMES:
                    setattr(lax, name, getattr(_loops, name))

    def __enter__(self) -> patch:
        return self

    def __exit__(self, *exc) -> None:
        unpatch()


def unpatch() -> None:
    """Undoes one :class:`patch`; the originals are back after the last one.

    Example:
        >>> import jax, stablejit
        >>> _ = stablejit.patch()
        >>> jax.jit is stablejit.stable_jit
        True
        >>> stablejit.unpatch()
        >>> jax.jit is stablejit.stable_jit
        False
    """
    global _DEPTH
    with _LOCK:
        if _DEPTH == 0:
            raise RuntimeError("stablejit.unpatch() without a matching patch()")
        _DEPTH -= 1
        if _DEPTH == 0:
            jax.jit = JIT
            for name, fn in LAX.items():
                setattr(lax, name, fn)
