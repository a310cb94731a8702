"""Arrays a function needs as concrete values: keyed by contents and baked in.

stablejit lifts the arrays a function reaches to inputs, so inside the trace
they are tracers. Code that needs one of them concretely — a Python ``if`` on
a closed-over mask, ``int(n)``, ``np.asarray(w)`` — then fails, where
``jax.jit``, which bakes closed-over arrays in as constants, runs. When a
trace fails that way, the variant is keyed again with those arrays *baked*:
passed to the trace as the very arrays (concrete, as under ``jax.jit``) and
keyed by their contents, so a new value retraces instead of going stale.

Which arrays: the ones JAX's error names (it names the argument, and the
canonical function names its leaves ``__stablejit_leaf<i>__``), else every
concrete one. Tracers of an enclosing transformation cannot be baked; code
that needs them concretely fails under ``jax.jit`` too.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from typing import NamedTuple

import jax
import numpy as np
import xxhash
from jax import core

from .._registry import Memo, on_clear

CONCRETE_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.NonConcreteBooleanIndexError,
)
"""What JAX raises when a tracer is used where a concrete value is needed."""

LEAF_NAME = "__stablejit_leaf{}__"
"""How the canonical function names its lifted parameters (see the runtime's signature)."""
_LEAF_NAMED = re.compile(r"__stablejit_leaf(\d+)__")


class Baked(NamedTuple):
    """The part of a key that says which leaves are baked, and their contents."""

    positions: frozenset[int]
    """Indices, in walk order, of the baked leaves."""
    digests: tuple
    """Each baked leaf's shape, dtype and a digest of its bytes."""


BAKED = Memo(4096)
"""``(options, function key)`` → the positions to bake in that variant."""
_LOCK = threading.Lock()


def split(variant, leaves: list) -> tuple[Baked | None, list]:
    """``(marker for the key, leaves to pass)`` of a variant: the leaves it
    bakes are keyed by contents and not passed."""
    # Most programs bake nothing: skip hashing the whole key on every walk.
    positions = BAKED.get(variant) if BAKED else None
    if positions is None:
        return None, leaves
    digests = tuple(_digest(leaves[i]) for i in sorted(positions))
    passed = [x for i, x in enumerate(leaves) if i not in positions]
    return Baked(positions, digests), passed


def merge(positions: frozenset[int], all_leaves: list, passed) -> list:
    """The leaves in walk order: baked ones as they are, the others from
    ``passed`` (tracers, at trace time)."""
    it = iter(passed)
    return [x if i in positions else next(it) for i, x in enumerate(all_leaves)]


def fall_back(error: BaseException, variants, baked: Baked | None, passed: list) -> list[int]:
    """After a failed trace with ``passed`` leaves: if concrete arrays among
    them were needed concretely, bakes them from now on in ``variants`` (the
    variant traced, and the one it is keyed as after the trace wrote its side
    channels) and returns their indices in walk order (empty: nothing to
    bake, the error is the user's)."""
    if not isinstance(error, CONCRETE_ERRORS):
        return []
    concrete = [
        j
        for j, x in enumerate(passed)
        if isinstance(x, (jax.Array, np.ndarray)) and not isinstance(x, core.Tracer)
    ]
    named = {int(m) for m in _LEAF_NAMED.findall(str(error))}
    # The leaves the error names, if they are concrete here; else the error
    # came from a nested stablejit level (a loop body), which numbers its own
    # leaves: then every concrete one, as jax.jit bakes every closed-over array.
    chosen = [j for j in concrete if j in named] or concrete
    if not chosen:
        return []
    old = baked.positions if baked is not None else frozenset()
    n = len(passed) + len(old)
    full = [i for i in range(n) if i not in old]  # passed index -> walk index
    new = [full[j] for j in chosen]
    with _LOCK:
        for variant in variants:
            BAKED.put(variant, old | set(new))
    return new


@on_clear
def _clear() -> None:
    _DIGESTS.clear()


# jax.Arrays are immutable: a digest is kept per array object while it lives.
# numpy arrays can change in place, so theirs are read every time.
_DIGESTS: dict[int, tuple[weakref.ref, tuple]] = {}


def _digest(x) -> tuple:
    if isinstance(x, jax.Array) and not isinstance(x, core.Tracer):
        known = _DIGESTS.get(id(x))
        if known is not None and known[0]() is x:
            return known[1]
        d = bytes_digest(np.asarray(x))
        _DIGESTS[id(x)] = (weakref.ref(x, functools.partial(_forget, id(x))), d)
        return d
    if isinstance(x, np.ndarray):
        return bytes_digest(x)
    return (type(x), x)  # a lifted Python number (lift_scalars)


def _forget(key: int, _ref=None) -> None:
    _DIGESTS.pop(key, None)


def bytes_digest(a: np.ndarray) -> tuple:
    """``a``'s shape, dtype and a digest of its bytes (in C order, whatever its layout)."""
    return (a.shape, a.dtype.str, xxhash.xxh3_128_digest(np.ascontiguousarray(a).tobytes()))
