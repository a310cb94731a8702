"""What a kind of value is: the :class:`Kind` protocol, and the table of kinds.

Every value reachable from a callable is of one kind. A kind knows, side by
side so that they visit children in the same order:

* ``key(w, v)``: the hashable static key of ``v``; arrays are appended to
  ``w.leaves`` instead of being hashed.
* ``rebuild(r, v, i)``: ``v`` with every leaf replaced by the next value of
  ``r`` (tracers, at trace time). At trace time (``r.in_place``) mutable
  values get the substitutes in place, through ``r.put``, and are returned
  themselves, so the traced code sees the program's own objects; immutable
  ones are copied. Otherwise every holder of a leaf is copied (see
  :class:`.rebuild.Rebuilder`). Only called for values that hold leaves.
* ``children(w, v)``: the labelled parts of ``v``, for people to read.
* ``guard(v, k, records)``: what a later value must be for ``v``'s key ``k``
  to stand without a walk (the fast path, see :mod:`.records`).

Kinds that can take part in reference cycles (``cyclic``) are allocated before
their children are rebuilt, so a back reference finds the new object. The
kinds themselves live in one module per family (values, containers,
callables, objects); :mod:`.classify` fills the table.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from .._markers import sentinel

MISSING = sentinel("missing")
"""Key of an unbound global or an empty cell."""
LEAF = sentinel("leaf")
"""Key of a value lifted to an input of the compiled computation."""
LIFTED_SCALAR = sentinel("lifted scalar")
"""Key of a Python number lifted to an input (see ``lift_scalars``)."""
REF = sentinel("ref")
"""Heads the key of a back reference to an enclosing value (see :func:`ref_key`)."""
NO_GUARD = sentinel("no fast path")
"""What :meth:`Kind.guard` returns for a value the fast path cannot re-check."""


def ref_key(n: int) -> tuple:
    """The key of a back reference to the ``n``-th cyclic value of a walk."""
    return (REF, n)


def ref_number(k) -> int | None:
    """``n`` if ``k`` is :func:`ref_key` ``(n)``, else None."""
    return k[1] if type(k) is tuple and len(k) == 2 and k[0] is REF else None


class Walker(Protocol):
    """What a kind's ``key`` and ``children`` receive (see :class:`.walk.KeyWalker`)."""

    leaves: list
    seen: dict[int, int]
    alive: list
    sinks: dict
    lift: Any
    name_ok: bool
    records: dict[int, Any]
    static: bool
    exact: bool
    sees_classes: bool

    def walk(self, v: Any) -> Any: ...

    def enter(self, v: Any) -> tuple | None: ...

    def fresh(self) -> Walker: ...


class Rebuilder(Protocol):
    """What a kind's ``rebuild`` receives (see :class:`.rebuild.Rebuilder`)."""

    in_place: bool
    memo: dict[int, Any]
    sinks: dict
    plan: Any

    def walk(self, v: Any) -> Any: ...

    def next_leaf(self) -> Any: ...

    def put(self, place: Any, target: Any, key: Any, value: Any) -> None: ...

    def copied(self, items: Any, current: Any, where: Any) -> None: ...


class Kind:
    """How one kind of value is keyed, rebuilt, described and re-checked."""

    name = "kind"
    cyclic = False

    def key(self, w: Walker, v: Any) -> Any:
        raise NotImplementedError

    def rebuild(self, r: Rebuilder, v: Any, i: int) -> Any:
        raise AssertionError(f"{self.name} values never hold leaves")

    def children(self, w: Walker, v: Any) -> list[tuple[str, Any]]:
        """``(label, value)`` of each part of ``v`` that its key is made of,
        for people to read (see :mod:`.._diagnostics.describe`); side
        channels are left out, as keys leave them out. Labels starting with
        ``[`` or ``.`` continue the parent's name."""
        return []

    def node_token(self, v: Any) -> Any:
        """What, besides its children, tells two values of this kind apart."""
        return None

    def watched(self, v: Any) -> dict | None:
        """A dict whose items ``v``'s key reads but that the walk never visits
        as a dict, for the snapshot of what a trace writes (see .snapshot)."""
        return None

    def guard(self, v: Any, k: Any, records: dict[int, Any]) -> Any:
        """What a later value must be to have key ``k`` where ``v`` had it:
        ``v`` itself (an immutable value keyed by what it is), a fast-path
        slot (see :mod:`.records`), or :data:`NO_GUARD`."""
        return NO_GUARD


class Leaf(Kind):
    """Arrays and tracers: lifted to inputs."""

    name = "array"

    def key(self, w, v):
        w.leaves.append(v)
        return LEAF

    def rebuild(self, r, v, i):
        return r.next_leaf()


LEAF_KIND = Leaf()

TABLE: dict[type, Kind] = {}
"""Exact type → its kind (filled by :mod:`.classify`, and per type as met)."""
KEYS: dict[type, Any] = {}
"""``TABLE`` with each kind's bound ``key`` method: the hot path's dispatch."""
LEAF_TYPES: set[type] = set()
"""The types whose kind is :data:`LEAF_KIND`: lets the fast path check a
container of arrays in one C-level pass (``LEAF_TYPES.issuperset(map(type, …))``)."""
TABLE_LOCK = threading.Lock()


def register_kind(cls: type, kind: Kind) -> None:
    """Makes ``kind`` the kind of every value of exact type ``cls``."""
    with TABLE_LOCK:
        TABLE[cls] = kind
        KEYS[cls] = kind.key
        if kind is LEAF_KIND:
            LEAF_TYPES.add(cls)
        else:
            LEAF_TYPES.discard(cls)


def forget_kind(cls: type) -> None:
    """Drops ``cls``'s kind, to be classified anew (the caller holds TABLE_LOCK)."""
    TABLE.pop(cls, None)
    KEYS.pop(cls, None)
    LEAF_TYPES.discard(cls)


def keys(w: Walker, values) -> tuple:
    """The keys of ``values``, in order, as ``w.walk`` gives them.

    Strings and arrays, most of what a pytree of parameters holds, are keyed
    inline when only the key is wanted; walks that watch every visit
    (``not w.exact``) take ``w.walk`` for each.
    """
    walk = w.walk
    if not w.exact:
        return tuple([walk(x) for x in values])
    leaves = w.leaves
    out = []
    for x in values:
        t = type(x)
        if t is str:
            out.append(x)
        elif TABLE.get(t) is LEAF_KIND:
            leaves.append(x)
            out.append(LEAF)
        else:
            out.append(walk(x))
    return tuple(out)


def float_key(x: float | complex) -> str | tuple[str, str]:
    """What keys a float (or a complex, part by part): its exact spelling, so
    that -0.0 is not 0.0 and NaN equals NaN, the same in every process. The
    one definition of "the same float" (the C accelerator's ``same_double``
    is its twin, proven to agree by ``tests/test_agreement.py``)."""
    if isinstance(x, complex):
        return (float.hex(x.real), float.hex(x.imag))
    return float.hex(x)
