"""The real ``jax.jit`` and ``jax.lax`` control-flow functions.

Captured at import, before patch mode can replace them (see :mod:`._patch`):
stablejit itself always calls these.
"""

from __future__ import annotations

import jax
from jax import lax

JIT = jax.jit
"""The real ``jax.jit``, whatever patch mode has done to ``jax.jit``."""

LAX_NAMES = ("while_loop", "fori_loop", "scan", "cond", "switch", "map")
LAX = {name: getattr(lax, name) for name in LAX_NAMES}
"""The real ``jax.lax`` control-flow functions."""
