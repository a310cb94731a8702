"""``stable(fn)``: a closure as a pytree, its structure static, its arrays leaves.

JAX keys everything it caches on pytree structure, and a function is a leaf
compared by identity, so a closure passed into ``jax.jit``, stored in an
``eqx.Module`` or carried through ``lax.scan`` misses whenever it is rebuilt.
:class:`StableFunction` is a pytree node whose auxiliary data is the
fingerprint of the function (compared by equality) and whose children are the
arrays it closes over: equal structure hits JAX's own caches, and the arrays
are traced like any other input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax

from ._fingerprint.kind import LEAF_KIND, Kind, keys, register_kind
from ._fingerprint.rebuild import rebuild
from ._fingerprint.walk import Lift, fingerprint
from ._registry import Memo
from ._runtime.argtrees import Static
from ._runtime.options import lift_option


class _Hole:
    """Stands for a leaf in a skeleton: a leaf to the walker, so the skeleton
    of a function rebuilds exactly like the function."""

    __slots__ = ()

    def __repr__(self):
        return "<hole>"


_HOLE = _Hole()
register_kind(_Hole, LEAF_KIND)


_STATICS = Memo(256)
"""Structure → its static part, so that a function rebuilt per call does not
rebuild its skeleton per call (see :func:`stable`)."""


class StableFunction:
    """A callable that is a pytree: see :func:`stable`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from stablejit import stable
        >>> w = jnp.ones(2)
        >>> f = stable(lambda x: x * w)
        >>> jax.tree_util.tree_leaves(f)[0] is w
        True
    """

    __slots__ = ("_static", "_leaves", "_fn", "__weakref__")

    def __init__(self, static: Static, leaves: list, fn: Any = _HOLE):
        self._static = static
        self._leaves = leaves
        self._fn = fn  # the function itself, once built

    @classmethod
    def of(cls, fn, lift: Lift = None) -> StableFunction:
        key, leaves = fingerprint(fn, lift)
        static = _STATICS.get(key)
        if static is None:
            skeleton = rebuild(fn, [_HOLE] * len(leaves), lift)
            static = _STATICS.put(key, Static(key, skeleton, lift))
        return cls(static, leaves, fn)

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if fn is _HOLE:
            fn = self._fn = rebuild(self._static.skeleton, self._leaves, self._static.lift)
        return fn(*args, **kwargs)

    @property
    def __wrapped__(self):
        return self._fn if self._fn is not _HOLE else self._static.skeleton

    def __repr__(self):
        return f"stable({self.__wrapped__!r}, {len(self._leaves)} leaves)"


# Leaves may be anything when unflattened (tracers, shapes, None from
# tree_map): the function is built only when called.
jax.tree_util.register_pytree_node(
    StableFunction,
    lambda f: (f._leaves, f._static),
    lambda static, leaves: StableFunction(static, list(leaves)),
)


class _StableFunctionKind(Kind):
    """A :class:`StableFunction` reached from a function: its structure and
    its leaves, not the skeleton (whose holes are not arrays)."""

    name = "stable function"

    def key(self, w, f):
        return (StableFunction, f._static, keys(w, f._leaves))

    def rebuild(self, r, f, i):
        walk = r.walk
        return StableFunction(f._static, [walk(x) for x in f._leaves])

    def children(self, w, f):
        return [(f"[{i}]", x) for i, x in enumerate(f._leaves)]

    def node_token(self, f):
        return f._static


register_kind(StableFunction, _StableFunctionKind())


def stable(fn: Callable, *, lift_scalars: bool | Iterable[str] = False) -> StableFunction:
    """Makes a closure a pytree: static part its fingerprint, children the
    arrays it reaches.

    Two ``stable`` functions built from equal structure (same code, equal
    static values, arrays of the same shapes) have equal tree structure, so a
    closure can be passed into ``jax.jit``, stored in an ``eqx.Module`` or
    carried through ``lax.scan`` and JAX's own caches hit, however often it is
    redefined. Its arrays are pytree leaves: traced inputs under
    transformations, mapped by ``jax.tree_util``. Unlike
    ``jax.tree_util.Partial``, any function works, nested closures and
    globals included.

    Arguments:
        fn: the function (or any callable) to wrap.
        lift_scalars: as for :func:`stable_jit`: also make closed-over Python
            numbers leaves.

    Returns:
        A callable :class:`StableFunction` that calls ``fn``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from stablejit import stable
        >>> def scaler(a):
        ...     return stable(lambda x: x * a)
        >>> apply = jax.jit(lambda f, x: f(x))
        >>> apply(scaler(jnp.float32(2)), jnp.ones(2))   # compiles
        Array([2., 2.], dtype=float32)
        >>> apply(scaler(jnp.float32(3)), jnp.ones(2))   # hits: same structure
        Array([3., 3.], dtype=float32)
    """
    if isinstance(fn, StableFunction):
        return fn
    if not callable(fn):
        raise TypeError(f"stable expects a callable, got {type(fn).__name__}: {fn!r}")
    return StableFunction.of(fn, lift_option(lift_scalars))
