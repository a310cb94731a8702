"""Kinds of atomic values: numbers, strings, None, and values keyed as they are.

Scalars are static by value (``1``, ``1.0`` and ``True`` differ) unless
``lift_scalars`` lifts them; long-lived objects (modules, classes, builtins)
are keyed by identity; immutable values with a meaningful ``__eq__``
(dtypes, shardings, enums) by value.
"""

from __future__ import annotations

import numpy as np

from .._config import config
from .._markers import IdRef
from .bake import bytes_digest
from .guards import ATOM_TYPES, HostArrayGuard
from .kind import LEAF, LIFTED_SCALAR, NO_GUARD, Kind, float_key

_INT32 = range(-(2**31), 2**31)


class Scalar(Kind):
    """Python scalars, by (type, value): ``1``, ``1.0`` and ``True`` differ.

    An ``int`` is lifted only when its variable is named in ``lift_scalars``
    (ints are mostly sizes, which must stay static), and if it fits int32.
    """

    name = "scalar"

    def key(self, w, v):
        if w.name_ok and type(v) is int and v in _INT32:
            w.leaves.append(v)
            return LIFTED_SCALAR
        return (type(v), v)

    def rebuild(self, r, v, i):
        return r.next_leaf()


class Str(Kind):
    """Strings are their own key: no other kind's key is a ``str``, and
    dict keys and names, the commonest values of all, then cost nothing."""

    name = "str"

    def key(self, w, v):
        return v


class Float(Kind):
    """Floats by value, or lifted (``lift_scalars``)."""

    name = "float"
    rebuild = Scalar.rebuild

    def key(self, w, v):
        if w.lift is not None and (w.lift is True or w.name_ok):
            w.leaves.append(v)
            return LIFTED_SCALAR
        return (type(v), float_key(v))


class Complex(Kind):
    name = "complex"
    rebuild = Scalar.rebuild

    def key(self, w, v):
        if w.lift is not None and (w.lift is True or w.name_ok):
            w.leaves.append(v)
            return LIFTED_SCALAR
        return (type(v), float_key(v))


class NumpyScalar(Kind):
    name = "numpy scalar"

    def key(self, w, v):
        return (type(v), v.dtype.str, v.tobytes())


class HostArray(Kind):
    """NumPy arrays: small ones are constants, as under ``jax.jit``; larger ones are lifted.

    ``jax.jit`` embeds a closed-over NumPy array as a constant, so NumPy code
    on it inside the trace (a comparison, ``np.all``, a Python ``if``) runs on
    concrete values, and libraries rely on that: numpyro validates a
    distribution's parameters only where they are concrete. An array of at
    most ``config.numpy_constant_bytes`` is such a constant here too, keyed by
    its contents, which are read on every call as they can be written in
    place: new contents retrace, never go stale. A larger one is lifted like
    a ``jax.Array``: never embedded in an executable, and new contents never
    recompile. Object arrays (pointers, not values) are always lifted.
    """

    name = "numpy array"

    def key(self, w, v):
        if v.nbytes <= config.numpy_constant_bytes and not v.dtype.hasobject:
            return (np.ndarray, *bytes_digest(v))
        w.leaves.append(v)
        return LEAF

    def rebuild(self, r, v, i):
        return r.next_leaf()  # (only a lifted one holds a leaf)

    def guard(self, v, k, records):
        return HostArrayGuard(v)  # (a lifted one's guard is ANY_ARRAY)


class NoneKind(Kind):
    name = "None"

    def key(self, w, v):
        return None


class Identity(Kind):
    """Long-lived objects keyed by identity: modules, classes, builtins.

    The key holds the object itself, which keeps it alive (so its id cannot
    be reused) and compares by identity for these types.
    """

    name = "identity"

    def key(self, w, v):
        return v

    def guard(self, v, k, records):
        return v


class IdentityRef(Kind):
    """Objects keyed by identity whose own ``__eq__`` is not identity."""

    name = "identity"

    def key(self, w, v):
        return IdRef(v)

    guard = Identity.guard


class Value(Kind):
    """Immutable values with a meaningful ``__eq__``: dtypes, shardings, enums."""

    name = "value"

    def key(self, w, v):
        return (type(v), v)

    guard = Identity.guard


class Constant(Kind):
    """Values that never change what is traced, whatever they are."""

    name = "ignored"

    def key(self, w, v):
        return type(v)


class Set(Kind):
    """Sets and frozensets, by their elements' keys (elements are hashable, so
    they hold no arrays and need no rebuild)."""

    name = "set"

    def key(self, w, v):
        return (type(v), frozenset([w.walk(x) for x in v]))

    def guard(self, v, k, records):
        # A frozenset of atoms (equinox's __abstractvars__ on every Module
        # class) cannot change: the very object again has its key.
        if type(v) is frozenset and all(type(x) in ATOM_TYPES for x in v):
            return v
        return NO_GUARD
