"""The fingerprint's fast path: a redefined function's last key, re-checked by identity.

A nested function is redefined on every call, typically over the same globals
dict and the same immutable values, new arrays, and other such functions (an
optax optimiser is closures of closures in NamedTuples). Per code object, the
last key is kept with what each child of the function was (a *record*); a
later function of that code whose children are again the very same objects,
arrays, or functions, tuples, lists, string-keyed dicts and plain objects
that fit in turn, has that key, found without a walk: containers are
re-checked item by item against what the key was built from, by identity
first, never re-keyed. Anything else takes the full walk (see :mod:`.walk`).

What a child must be is each kind's say (``Kind.slot``); this module holds
the records and the slots they are made of.
"""

from __future__ import annotations

import operator
import types
import weakref
from itertools import chain, count, repeat

from .._markers import sentinel
from .code import FastRecords
from .kind import LEAF, LEAF_TYPES, LIFTED_SCALAR, MISSING, NO_SLOT, TABLE
from .parts import CELL, DEFAULTS, GLOBAL, KWDEFAULTS, SUNK
from .sinks import is_sink_key

FAST_PATH_TRIES = 8
"""Failed fast-path builds after which a code object's functions stop trying
(one whose children the slots cannot re-check never qualifies)."""

KEPT_RECORDS = 4
"""Records kept per code object. One code keyed at several places of one
structure (optax wraps each transform of a chain in a closure of one code)
keeps a record per shape, instead of one rebuilt at every place."""


def known_key(fast: FastRecords, fn, w):
    """``fn``'s key from the first record of its code (``fast``, see
    ``CodeInfo.fast``) that holds in walk ``w``, or None. The record that
    holds moves to the front, where a call's hot path looks."""
    front = fast.front
    for record in (front, *fast.others):
        if record.lift is not w.lift:
            continue
        key = record.match(fn, w.leaves, w.sinks, w.seen)
        if key is not None:
            if record is not front:
                remember(fast, record)
            w.records[id(fn)] = record
            return key
    return None


def remember(fast: FastRecords, record) -> None:
    """Puts ``record`` at the front of its code's records, keeping the most
    recent others. Tuples are replaced, not mutated, so a concurrent walk
    reading them sees one version (any record only ever vouches for itself)."""
    front = fast.front
    if front is not None and front is not record:
        others = [front, *(r for r in fast.others if r is not record)]
        fast.others = tuple(others[: KEPT_RECORDS - 1])
    fast.front = record


LEAF_SLOT = sentinel("leaf slot")
"""The slot of an array: any array may stand there."""
ATOM_TYPES = frozenset({int, bool, float, complex, str, bytes, type(None)})


def _same_atom(v, expected) -> bool:
    """Whether ``v`` has the key of the atom ``expected`` (an equal scalar
    computed anew, such as a learning rate, is another object)."""
    t = type(expected)
    if type(v) is not t or t not in ATOM_TYPES:
        return False
    # repr tells -0.0 from 0.0 and makes NaN equal itself, as the key does.
    return repr(v) == repr(expected) if t is float or t is complex else v == expected


def _fits(v, expected, leaves, sinks, seen) -> bool:
    """Whether ``v`` may stand where a fast-path record saw ``expected`` (not
    ``v`` itself): another array for an array (appended to ``leaves``), an
    equal atom, or a nested function or tuple whose own children fit."""
    if expected is LEAF_SLOT:
        if type(v) not in LEAF_TYPES:
            return False
        leaves.append(v)
        return True
    if type(expected) in _CHECKED_SLOTS:
        return expected.fits(v, leaves, sinks, seen)
    return _same_atom(v, expected)


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


_LEAVES = sentinel("all leaves")
_SAME = sentinel("all the very objects")


class _Items:
    """Slots for the items of a container, with the checks a common shape
    allows done in one C-level pass: all arrays (a params dict), or all the
    very objects seen (a config dict, an object's attributes)."""

    __slots__ = ("items", "mode", "objects")

    def __init__(self, items: tuple):
        self.items = items
        self.objects = None
        if items and all(x is LEAF_SLOT for x in items):
            self.mode = _LEAVES
        elif not any(x is LEAF_SLOT or type(x) in _CHECKED_SLOTS for x in items):
            self.mode = _SAME
        else:
            self.mode = None
            if all(type(x) is ObjectSlot and x.state.mode is _SAME for x in items):
                self.objects = _Objects(items)

    def items_fit(self, values, leaves, sinks, seen) -> bool:
        """Whether ``values`` (as many as ``items``) fit, item by item."""
        mode = self.mode
        if mode is _LEAVES:
            if not LEAF_TYPES.issuperset(map(type, values)):
                return False
            leaves.extend(values)
            return True
        if mode is _SAME and all(map(operator.is_, values, self.items)):
            return True
        objects = self.objects
        if objects is not None:
            same = objects.same(values, sinks, seen)
            if same is not None:
                return same
        # (Lengths are checked by the containers.)
        for x, expected in zip(values, self.items, strict=False):
            if x is not expected and not _fits(x, expected, leaves, sinks, seen):
                return False
        return True


class _Objects:
    """Plain objects whose attributes were all atoms (logits processors):
    re-checked all at once, in C-level passes over their ``__dict__``s
    (types, sizes, then every name and value by identity), instead of an
    object at a time."""

    __slots__ = ("types", "kinds", "sizes", "names", "values")

    def __init__(self, items):
        self.types = [x.cls for x in items]
        self.kinds = tuple({x.cls: x.kind for x in items}.items())
        self.sizes = [len(x.state.keys) for x in items]
        self.names = tuple(chain.from_iterable(x.state.keys for x in items))
        self.values = tuple(chain.from_iterable(x.state.items for x in items))

    def same(self, values, sinks, seen) -> bool | None:
        """True if ``values`` are such objects holding the very names and
        values seen (numbered in ``seen`` as the walk numbers each object,
        then its ``__dict__``); False if they must not match; None if the
        item-by-item check must decide (an equal value anew, say)."""
        objs = values if type(values) is list else list(values)
        if list(map(type, objs)) != self.types:
            return False
        dicts = list(map(_get, objs, repeat("__dict__")))
        if (
            list(map(len, dicts)) != self.sizes
            or not all(map(operator.is_, chain.from_iterable(dicts), self.names))
            or not all(map(operator.is_, chain.from_iterable(map(dict.values, dicts)), self.values))
        ):
            return None
        for cls, kind in self.kinds:
            if TABLE.get(cls) is not kind:
                return False
        ids = list(chain.from_iterable(zip(map(id, objs), map(id, dicts), strict=True)))
        if not seen.keys().isdisjoint(ids) or (sinks and not sinks.keys().isdisjoint(ids)):
            return False
        n = len(seen)
        seen.update(zip(ids, count(n)))
        # An object twice: the walk keys the second as a back reference.
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


def _fresh(v, sinks, seen) -> bool:
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
        if type(v) is not list or len(v) != len(self.items) or not _fresh(v, sinks, seen):
            return False
        return self.items_fit(v, leaves, sinks, seen)


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
        if not all(map(operator.is_, v, keys)) and not (
            all(type(k) is str for k in v) and tuple(v) == keys
        ):
            return False
        return _fresh(v, sinks, seen) and self.items_fit(v.values(), leaves, sinks, seen)


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
        return self.state.fits(_get(v, "__dict__"), leaves, sinks, seen)


_get = object.__getattribute__


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


# may read or number ``seen``
_SEEN_SLOTS = frozenset({FunctionSlot, TupleSlot, RefSlot, ListSlot, DictSlot, ObjectSlot})
_CHECKED_SLOTS = _SEEN_SLOTS | {LiftedSlot}


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
    def build(cls, fn, places, part_keys, w, key):
        """A fast path for ``fn``'s code, or None if ``fn`` has other children
        (``w``: the walk that just keyed ``fn`` as ``key``, its parts
        ``places`` as ``part_keys``; see :mod:`.parts`)."""
        # Defaults are re-checked as one object, so they must hold no leaves:
        # atoms, and under lift_scalars no numbers that it lifts.
        allowed = ATOM_TYPES if w.lift is None else ATOM_TYPES - {float, complex}
        for d in (fn.__defaults__, fn.__kwdefaults__):
            values = d.values() if isinstance(d, dict) else d or ()
            if any(type(v) not in allowed for v in values):
                return None
        checks = []
        cells = []
        for (what, name, _, v), k in zip(places, part_keys, strict=True):
            if what is GLOBAL:
                if v is SUNK:
                    continue  # re-read by nobody: the key holds the sink's identity
                slot = slot_of(v, k, w.records)
                if slot is NO_SLOT:
                    return None
                checks.append((name, slot))
            elif what is CELL:
                if v is SUNK:  # a sink is this very cell, which a redefinition replaces
                    return None
                slot = slot_of(v, k, w.records)
                if slot is NO_SLOT:
                    return None
                cells.append(slot)
            elif what is not DEFAULTS and what is not KWDEFAULTS:
                return None  # attribute chains and function attributes: the full walk
        g, b = fn.__globals__, fn.__builtins__
        self = cls()
        # By id, not reference: a record must not keep a module's globals
        # alive. Matching ids are enough, as every name is re-read from the
        # function's own dicts and compared by identity with what is held here.
        self.g_id, self.b_id, self.sinks = id(g), id(b), w.sinks
        self.defaults, self.kwdefaults = fn.__defaults__, fn.__kwdefaults__
        self.globals, self.cells, self.key = tuple(checks), tuple(cells), key
        # Nested slots number the functions they match, as a walk would, so
        # that back references (absolute numbers in ``key``, each re-checked
        # by a RefSlot) count the same either way.
        self.nested = any(type(x) in _SEEN_SLOTS for x in (*(s for _, s in checks), *cells))
        # The walk's lift_scalars (None or True): it decides the keys of numbers.
        self.lift = w.lift
        w.records[id(fn)] = self
        # Cache entries of ``key``, per stable_jit options: lets a call skip
        # hashing the key (see StableJitted.__call__).
        self.entries = {}
        return self

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


def slot_of(v, k, records):
    """What a later value must be where ``v`` was keyed ``k``: ``v`` itself,
    any array, a lifted number of its type, or what ``v``'s kind says
    (``Kind.slot``: a function or tuple re-checked in turn, a back
    reference's object), else NO_SLOT (no fast path)."""
    if k is LEAF:
        return LEAF_SLOT
    if k is LIFTED_SCALAR:
        return LiftedSlot(type(v))
    if is_sink_key(k) or k is v or type(v) in ATOM_TYPES:
        return v
    kind = TABLE.get(type(v))
    return NO_SLOT if kind is None else kind.slot(v, k, records)
