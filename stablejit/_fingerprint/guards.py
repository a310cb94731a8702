"""Guards: what a child of a fast-path record must be for the record's key to stand.

One class per kind of child (a *slot*), each with ``fits(v, leaves, sinks,
seen)``: whether ``v`` may stand where the record saw its value, appending
the arrays it holds to ``leaves`` and numbering in ``seen`` what the walk
would number (functions, lists, dicts, objects), so that back references
count the same either way. An immutable value is its own slot (the very
object, or an equal atom); an array's is :data:`LEAF_SLOT`.

:mod:`.checker` compiles a record's slots into straight-line code; these
classes are what it falls back to, and what it is checked against.
"""

from __future__ import annotations

import operator
import types
import weakref
from itertools import chain, count

import numpy as np

from .. import _native
from .._markers import sentinel
from .kind import LEAF_TYPES, TABLE

LEAF_SLOT = sentinel("leaf slot")
"""The slot of an array: any array may stand there."""
ATOM_TYPES = frozenset({int, bool, float, complex, str, bytes, type(None)})


def same_atom(v, expected) -> bool:
    """Whether ``v`` has the key of the atom ``expected`` (an equal scalar
    computed anew, such as a learning rate, is another object)."""
    t = type(expected)
    if type(v) is not t or t not in ATOM_TYPES:
        return False
    # repr tells -0.0 from 0.0 and makes NaN equal itself, as the key does.
    return repr(v) == repr(expected) if t is float or t is complex else v == expected


def same_defaults(d, expected) -> bool:
    """Whether ``d`` (a function's ``__defaults__`` or ``__kwdefaults__``)
    has the key of ``expected``, one of atoms: ``def f(x, n=n)`` builds a new
    tuple at each definition, of equal atoms if ``n`` is equal."""
    if d is expected:
        return True
    if type(d) is not type(expected) or len(d) != len(expected):
        return False
    if type(d) is dict:
        return list(d) == list(expected) and all(map(same_atom, d.values(), expected.values()))
    return all(map(same_atom, d, expected))


def undo(leaves, n, seen, n_seen) -> None:
    """Undoes what a failed match appended and numbered (past ``n`` leaves
    and ``n_seen`` numbers), so the walk that follows starts clean."""
    del leaves[n:]
    while seen is not None and len(seen) > n_seen:
        seen.popitem()
    return None


def slot_fits(v, expected, leaves, sinks, seen) -> bool:
    """Whether ``v`` may stand where a fast-path record saw ``expected`` (not
    ``v`` itself): another array for an array (appended to ``leaves``), an
    equal atom, or a nested function or tuple whose own children fit."""
    if expected is LEAF_SLOT:
        if type(v) not in LEAF_TYPES:
            return False
        leaves.append(v)
        return True
    if type(expected) in CHECKED_SLOTS:
        return expected.fits(v, leaves, sinks, seen)
    return same_atom(v, expected)


class FunctionSlot:
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


LEAVES = sentinel("all leaves")
SAME = sentinel("all the very objects")


class _Items:
    """Slots for the items of a container, with the checks a common shape
    allows done in one C-level pass: all arrays (a params dict), or all the
    very objects seen (a config dict, an object's attributes); or, for
    items that are all such dicts or objects, in a few passes over all of
    them (``batch``: a params dict's layers, a list of logits processors)."""

    __slots__ = ("items", "mode", "batch")

    def __init__(self, items: tuple):
        self.items = items
        self.batch = None
        if items and all(x is LEAF_SLOT for x in items):
            self.mode = LEAVES
        elif not any(x is LEAF_SLOT or type(x) in CHECKED_SLOTS for x in items):
            self.mode = SAME
        else:
            self.mode = None
            if all(type(x) is ObjectSlot and x.state.mode is SAME for x in items):
                self.batch = _Objects(items)
            elif all(type(x) is DictSlot and x.mode is LEAVES for x in items):
                self.batch = _LeafDicts(items)

    def items_fit(self, values, leaves, sinks, seen) -> bool:
        """Whether ``values`` (as many as ``items``) fit, item by item."""
        mode = self.mode
        if mode is LEAVES:
            if not LEAF_TYPES.issuperset(map(type, values)):
                return False
            leaves.extend(values)
            return True
        if mode is SAME and all(map(operator.is_, values, self.items)):
            return True
        batch = self.batch
        if batch is not None:
            fit = batch.fit(values, leaves, sinks, seen)
            if fit is not None:
                return fit
        # (Lengths are checked by the containers.)
        for x, expected in zip(values, self.items, strict=False):
            if x is not expected and not slot_fits(x, expected, leaves, sinks, seen):
                return False
        return True


class _Objects:
    """Plain objects whose attributes were all atoms (logits processors):
    re-checked all at once, in C-level passes over their ``__dict__``s
    (types, sizes, then every name and value by identity), instead of an
    object at a time; with the C accelerator built, in one pass of C."""

    __slots__ = ("types", "kinds", "sizes", "names", "values")

    def __init__(self, items):
        self.types = [x.cls for x in items]
        self.kinds = tuple({x.cls: x.kind for x in items}.items())
        self.sizes = tuple(len(x.state.keys) for x in items)
        self.names = tuple(chain.from_iterable(x.state.keys for x in items))
        self.values = tuple(chain.from_iterable(x.state.items for x in items))

    def fit(self, values, leaves, sinks, seen) -> bool | None:
        """True if ``values`` are such objects holding the very names and
        values seen (numbered in ``seen`` as the walk numbers each object,
        then its ``__dict__``); False if they must not match; None if the
        item-by-item check must decide (an equal value anew, say)."""
        objs = values if type(values) is list else list(values)
        for cls, kind in self.kinds:
            # The kind, and the plain attribute lookup that _DICT relies on.
            if TABLE.get(cls) is not kind or cls.__getattribute__ is not get_attr:
                return False
        if _native.NATIVE is not None:
            return _native.NATIVE.objects_fit(
                objs, self.types, self.sizes, self.names, self.values, sinks, seen
            )
        if list(map(type, objs)) != self.types:
            return False
        dicts = list(map(_DICT, objs))
        if (
            tuple(map(len, dicts)) != self.sizes
            or not all(map(operator.is_, chain.from_iterable(dicts), self.names))
            or not all(map(operator.is_, chain.from_iterable(map(dict.values, dicts)), self.values))
        ):
            return None
        # Each object, then its __dict__: the walk's order.
        ids = [None] * (2 * len(objs))
        ids[::2] = map(id, objs)
        ids[1::2] = map(id, dicts)
        return all_fresh(ids, sinks, seen)


class _LeafDicts:
    """Dicts of arrays under string keys (the layers of a params dict):
    re-checked all at once, in C-level passes (types, sizes, every name by
    identity, every value's type), instead of a dict at a time."""

    __slots__ = ("sizes", "names")

    def __init__(self, items):
        self.sizes = [len(x.keys) for x in items]
        self.names = tuple(chain.from_iterable(x.keys for x in items))

    def fit(self, values, leaves, sinks, seen) -> bool | None:
        """True if ``values`` are such dicts, now holding arrays (appended to
        ``leaves``, each dict numbered in ``seen`` as the walk numbers it);
        False if they must not match; None if the dict-by-dict check must
        decide (equal names built anew)."""
        dicts = values if type(values) is list else list(values)
        if not _DICT_TYPE.issuperset(map(type, dicts)) or list(map(len, dicts)) != self.sizes:
            return False
        if not all(map(operator.is_, chain.from_iterable(dicts), self.names)):
            return None
        arrays = list(chain.from_iterable(map(dict.values, dicts)))
        if not LEAF_TYPES.issuperset(map(type, arrays)) or not all_fresh(
            list(map(id, dicts)), sinks, seen
        ):
            return False
        leaves.extend(arrays)
        return True


_DICT_TYPE = frozenset({dict})


def all_fresh(ids: list, sinks, seen) -> bool:
    """Numbers ``ids`` in order as :func:`fresh` would one at a time; False
    if the walk would key any of them otherwise (met before, twice here, or
    a side channel)."""
    if not seen.keys().isdisjoint(ids) or (sinks and not sinks.keys().isdisjoint(ids)):
        return False
    n = len(seen)
    seen.update(zip(ids, count(n)))
    return len(seen) == n + len(ids)


class TupleSlot(_Items):
    """A tuple or NamedTuple of this type whose items fit these slots."""

    __slots__ = ("type",)

    def __init__(self, tp, items):
        super().__init__(items)
        self.type = tp

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not self.type or len(v) != len(self.items):
            return False
        return self.items_fit(v, leaves, sinks, seen)


def fresh(v, sinks, seen) -> bool:
    """Numbers ``v`` as the walk numbers a list, dict or object it meets for
    the first time; False if the walk would key it otherwise (a back
    reference, a side channel)."""
    if id(v) in seen or (sinks and id(v) in sinks):
        return False
    seen[id(v)] = len(seen)
    return True


class ListSlot(_Items):
    """A list (not a side channel) whose items fit these slots."""

    __slots__ = ()

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not list or len(v) != len(self.items) or not fresh(v, sinks, seen):
            return False
        return self.items_fit(v, leaves, sinks, seen)


def same_names(d: dict, names: tuple) -> bool:
    """Whether ``d``'s keys are ``names``, in order, as strings: equal
    strings built anew, where the very ones (interned names) did not come."""
    return all(type(k) is str for k in d) and tuple(d) == names


class DictSlot(_Items):
    """A dict (not a side channel) with these string keys, in this order,
    whose values fit these slots."""

    __slots__ = ("keys",)

    def __init__(self, keys, items):
        super().__init__(items)
        self.keys = keys

    def fits(self, v, leaves, sinks, seen) -> bool:
        keys = self.keys
        if type(v) is not dict or len(v) != len(keys):
            return False
        # Literal and attribute names are interned, so the very strings
        # come back; equal strings built anew are compared as such.
        if not all(map(operator.is_, v, keys)) and not same_names(v, keys):
            return False
        return fresh(v, sinks, seen) and self.items_fit(v.values(), leaves, sinks, seen)


class ObjectSlot:
    """An instance of this class, still of this kind, whose ``__dict__``
    fits this DictSlot (an HF logits processor, a config object)."""

    __slots__ = ("cls", "kind", "state")

    def __init__(self, cls, kind, state):
        self.cls, self.kind, self.state = cls, kind, state

    def fits(self, v, leaves, sinks, seen) -> bool:
        cls = self.cls
        if type(v) is not cls or id(v) in seen or TABLE.get(cls) is not self.kind:
            return False
        seen[id(v)] = len(seen)
        return self.state.fits(get_attr(v, "__dict__"), leaves, sinks, seen)


get_attr = object.__getattribute__
_DICT = operator.attrgetter("__dict__")
"""An object's ``__dict__`` (through its class's lookup: only for classes
that keep ``object``'s, where it is the very dict the walk reads)."""


class RefSlot:
    """The object the walk numbered ``n``: a back reference (optax's chain
    holds the same functions in two places)."""

    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    def fits(self, v, leaves, sinks, seen) -> bool:
        return seen.get(id(v), -1) == self.n


class LiftedSlot:
    """A number of this type, lifted to an input (``lift_scalars=True``)."""

    __slots__ = ("type",)

    def __init__(self, tp):
        self.type = tp

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not self.type:
            return False
        leaves.append(v)
        return True


class HostArraySlot:
    """A NumPy array kept as a constant (see ``values.HostArray``): another
    of the same shape, dtype and contents."""

    __slots__ = ("shape", "dtype", "data")

    def __init__(self, a):
        self.shape, self.dtype, self.data = a.shape, a.dtype, a.tobytes()

    def fits(self, v, leaves, sinks, seen) -> bool:
        return (
            type(v) is np.ndarray
            and v.shape == self.shape
            and v.dtype == self.dtype
            and v.tobytes() == self.data
        )


# may read or number ``seen``
SEEN_SLOTS = frozenset({FunctionSlot, TupleSlot, RefSlot, ListSlot, DictSlot, ObjectSlot})
CHECKED_SLOTS = SEEN_SLOTS | {LiftedSlot, HostArraySlot}
