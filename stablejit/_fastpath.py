"""The fingerprint's fast path: a redefined function's last key, re-checked by identity.

A nested function is redefined on every call, typically over the same globals
dict and the same immutable values, new arrays, and other such functions (an
optax optimiser is closures of closures in NamedTuples). Per code object, the
last key is kept with what each child of the function was (a *record*); a
later function of that code whose children are again the very same objects,
arrays, or functions and tuples that fit in turn, has that key, found without
a walk. Anything else takes the full walk of :mod:`stablejit._kinds`.
"""

from __future__ import annotations

import operator
import types
import weakref

from ._kinds import (
    _FUNCTION,
    _IDENTITY,
    _IDENTITY_REF,
    _LEAF,
    _PYTREE,
    _VALUE,
    LEAF,
    LIFTED_SCALAR,
    MISSING,
    TABLE,
    _cell_value,
    _flatten_one_level,
    _Jitted,
)
from ._sinks import is_sink_key

FAST_PATH_TRIES = 8
"""Failed fast-path builds after which a code object's functions stop trying
(one whose children are dicts, lists or objects never qualifies)."""

KEPT_RECORDS = 4
"""Records kept per code object. One code keyed at several places of one
structure (optax wraps each transform of a chain in a closure of one code)
keeps a record per shape, instead of one rebuilt at every place."""


def known_key(fast: list, fn, w):
    """``fn``'s key from the first record of its code (``fast``, see
    ``CodeInfo.fast``) that holds in walk ``w``, or None. The record that
    holds moves to the front, where a call's hot path looks."""
    front = fast[0]
    for record in (front, *fast[2]):
        if record.lift is not w.lift:
            continue
        key = record.match(fn, w.leaves, w.sinks, w.seen)
        if key is not None:
            if record is not front:
                remember(fast, record)
            w.records[id(fn)] = record
            return key
    return None


def remember(fast: list, record) -> None:
    """Puts ``record`` at the front of its code's records, keeping the most
    recent others. Lists are replaced, not mutated, so a concurrent walk
    reading them sees one version (any record only ever vouches for itself)."""
    front = fast[0]
    if front is not None and front is not record:
        others = [front, *(r for r in fast[2] if r is not record)]
        fast[2] = tuple(others[: KEPT_RECORDS - 1])
    fast[0] = record


_LEAF_SLOT = type("LeafSlot", (), {"__repr__": lambda self: "<leaf slot>"})()
_ATOM_TYPES = frozenset({int, bool, float, complex, str, bytes, type(None)})


def _same_atom(v, expected) -> bool:
    """Whether ``v`` has the key of the atom ``expected`` (an equal scalar
    computed anew, such as a learning rate, is another object)."""
    t = type(expected)
    if type(v) is not t or t not in _ATOM_TYPES:
        return False
    # repr tells -0.0 from 0.0 and makes NaN equal itself, as the key does.
    return repr(v) == repr(expected) if t is float or t is complex else v == expected


def _fits(v, expected, leaves, sinks, seen) -> bool:
    """Whether ``v`` may stand where a fast-path record saw ``expected`` (not
    ``v`` itself): another array for an array (appended to ``leaves``), an
    equal atom, or a nested function or tuple whose own children fit."""
    if expected is _LEAF_SLOT and TABLE.get(type(v)) is _LEAF:
        leaves.append(v)
        return True
    if type(expected) in _CHECKED_SLOTS:
        return expected.fits(v, leaves, sinks, seen)
    return _same_atom(v, expected)


def _is_namedtuple(v) -> bool:
    """A NamedTuple as jax.tree_util flattens one: its items, no metadata."""
    if not (isinstance(v, tuple) and hasattr(type(v), "_fields")):
        return False
    children, treedef = _flatten_one_level(v)
    same = len(children) == len(v) and all(map(operator.is_, children, v))
    return same and treedef.node_data()[1] is None


class _FunctionSlot:
    """A nested function (optax's and blackjax's closures of closures): one
    of the same code, re-checked by the record that keyed the function seen
    there (functions of one code at several places, as in optax's chain,
    each keep their own)."""

    __slots__ = ("code", "record")

    def __init__(self, code, record):
        # Weakly: records of codes that hold each other's functions must not
        # keep those codes alive (a dead code matches nothing).
        self.code, self.record = weakref.ref(code), record

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not types.FunctionType or v.__code__ is not self.code():
            return False
        # Numbered as the walk numbers functions; a second visit would be a
        # back reference there, so it is not a match here.
        if id(v) in seen:
            return False
        seen[id(v)] = len(seen)
        return self.record.match(v, leaves, sinks, seen) is not None


class _TupleSlot:
    """A tuple or NamedTuple of this type whose items fit these slots."""

    __slots__ = ("type", "items")

    def __init__(self, tp, items):
        self.type, self.items = tp, items

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not self.type or len(v) != len(self.items):
            return False
        for x, expected in zip(v, self.items, strict=True):
            if x is not expected and not _fits(x, expected, leaves, sinks, seen):
                return False
        return True


class _RefSlot:
    """The object the walk numbered ``n``: a back reference (optax's chain
    holds the same functions in two places)."""

    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    def fits(self, v, leaves, sinks, seen) -> bool:
        return seen.get(id(v), -1) == self.n


class _LiftedSlot:
    """A number of this type, lifted to an input (``lift_scalars=True``)."""

    __slots__ = ("type",)

    def __init__(self, tp):
        self.type = tp

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not self.type:
            return False
        leaves.append(v)
        return True


_SEEN_SLOTS = (_FunctionSlot, _TupleSlot, _RefSlot)  # may read or number ``seen``
_CHECKED_SLOTS = (*_SEEN_SLOTS, _LiftedSlot)
_NO_SLOT = type("NoSlot", (), {"__repr__": lambda self: "<no fast path>"})()


class FastPath:
    """A record: the last key of a function of one code object, and what each
    of its children must be for that key to stand (see the module's
    docstring). The same globals dict and side channels are required; each
    child must be the very same object (immutable, so equal), another array,
    a lifted number of its type, or a function or tuple whose own slots fit.
    """

    __slots__ = (
        "g_id",
        "b_id",
        "sinks",
        "defaults",
        "kwdefaults",
        "globals",
        "cells",
        "key",
        "entries",
        "nested",
        "lift",
    )

    @classmethod
    def build(cls, fn, info, w, gskip, gkeys, ckeys, key):
        """A fast path for ``fn``'s code, or None if ``fn`` has other children
        (``w``: the walk that just keyed ``fn`` as ``key``)."""
        # Defaults are re-checked as one object, so they must hold no leaves:
        # atoms, and under lift_scalars no numbers that it lifts.
        allowed = _ATOM_TYPES if w.lift is None else _ATOM_TYPES - {float, complex}
        for d in (fn.__defaults__, fn.__kwdefaults__):
            values = d.values() if isinstance(d, dict) else d or ()
            if any(type(v) not in allowed for v in values):
                return None
        g, b = fn.__globals__, fn.__builtins__
        checks = []
        for name, k in zip(info.global_names, gkeys, strict=True):
            if gskip and name in gskip:
                continue
            v = g.get(name, MISSING)
            if v is MISSING:
                v = b.get(name, MISSING)
            slot = cls._slot(v, k, w.records)
            if slot is _NO_SLOT:
                return None
            checks.append((name, slot))
        cells = []
        for c, k in zip(fn.__closure__ or (), ckeys, strict=True):
            if is_sink_key(k):  # a sink is this very cell, which a redefinition replaces
                return None
            slot = cls._slot(_cell_value(c), k, w.records)
            if slot is _NO_SLOT:
                return None
            cells.append(slot)
        self = cls()
        # By id, not reference: a record must not keep a module's globals
        # alive. Matching ids are enough, as every name is re-read from the
        # function's own dicts and compared by identity with what is held here.
        self.g_id, self.b_id, self.sinks = id(g), id(b), w.sinks
        self.defaults, self.kwdefaults = fn.__defaults__, fn.__kwdefaults__
        self.globals, self.cells, self.key = tuple(checks), tuple(cells), key
        # Nested slots number the functions they match, as a walk would, so
        # that back references (absolute numbers in ``key``, each re-checked
        # by a _RefSlot) count the same either way.
        self.nested = any(type(x) in _SEEN_SLOTS for x in (*(s for _, s in checks), *cells))
        # The walk's lift_scalars (None or True): it decides the keys of numbers.
        self.lift = w.lift
        w.records[id(fn)] = self
        # Cache entries of ``key``, per stable_jit options: lets a call skip
        # hashing the key (see StableJitted.__call__).
        self.entries = {}
        return self

    @classmethod
    def _slot(cls, v, k, records):
        """What a later value must be: ``v`` itself, any array, a lifted number
        of its type, a function or tuple re-checked in turn, the object a back
        reference names, or _NO_SLOT (no fast path)."""
        if k is LEAF:
            return _LEAF_SLOT
        if k is LIFTED_SCALAR:
            return _LiftedSlot(type(v))
        if is_sink_key(k) or k is v or type(v) in _ATOM_TYPES:
            return v
        tp = type(v)
        kind = TABLE.get(tp)
        if kind is _IDENTITY or kind is _IDENTITY_REF or kind is _VALUE:
            return v
        if kind is _FUNCTION:
            if k[0] == "ref":  # a function keys as its digest or as a back reference
                return _RefSlot(k[1])
            record = records.get(id(v))
            # Only if its own record gave ``k`` (so re-checks it).
            if record is None or record.key is not k:
                return _NO_SLOT
            return _FunctionSlot(v.__code__, record)
        if type(kind) is _Jitted and k[1] is v._fun:
            # A jax.jit of a library function (jnp.tanh): the same object
            # again keys the same, as a jit's function and options are fixed.
            return v
        if kind is TABLE[tuple] or (kind is _PYTREE and _is_namedtuple(v)):
            item_keys = k[1] if kind is TABLE[tuple] else k[2]
            items = tuple([cls._slot(x, ik, records) for x, ik in zip(v, item_keys, strict=True)])
            return _NO_SLOT if _NO_SLOT in items else _TupleSlot(tp, items)
        return _NO_SLOT

    def match(self, fn, leaves, sinks, seen=None):
        """``fn``'s key if the checks hold (its leaves appended to ``leaves``,
        nested functions numbered in ``seen`` as a walk would), else None."""
        if (
            id(fn.__globals__) != self.g_id
            or id(fn.__builtins__) != self.b_id
            or sinks is not self.sinks
            or fn.__defaults__ is not self.defaults
            or fn.__kwdefaults__ is not self.kwdefaults
            or fn.__dict__
        ):
            return None
        if seen is None and self.nested:
            seen = {id(fn): 0}  # a walk from ``fn`` numbers it first
        n, n_seen = len(leaves), len(seen) if seen is not None else 0
        g = fn.__globals__
        for name, expected in self.globals:
            v = g.get(name, MISSING)
            if v is MISSING:
                v = fn.__builtins__.get(name, MISSING)
            if v is not expected and not _fits(v, expected, leaves, sinks, seen):
                return self._fail(leaves, n, seen, n_seen)
        cells = self.cells
        if not cells:  # (a zip here would cost more than everything above)
            return self.key
        closure = fn.__closure__
        for i, expected in enumerate(cells):
            try:
                v = closure[i].cell_contents
            except ValueError:
                v = MISSING
            if v is not expected and not _fits(v, expected, leaves, sinks, seen):
                return self._fail(leaves, n, seen, n_seen)
        return self.key

    @staticmethod
    def _fail(leaves, n, seen, n_seen) -> None:
        # Undo what a partial match added, so the walk that follows starts clean.
        del leaves[n:]
        while seen is not None and len(seen) > n_seen:
            seen.popitem()
        return None
