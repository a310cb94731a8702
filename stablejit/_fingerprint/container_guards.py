"""The guards of containers and plain objects: tuples, lists, dicts, objects.

Each kind holds its three forms side by side, as every :class:`.guards.Guard`
does. Their items are guards in turn, re-checked with the checks a common
shape allows done in one C-level pass: all arrays (a params dict), or all
the very objects seen (a config dict, an object's attributes); or, for
items that are all such dicts or objects, in a few passes over all of them
(``batch``: a params dict's layers, a list of logits processors).
"""

from __future__ import annotations

import operator
from itertools import chain, count

from .. import _native
from .._markers import sentinel
from .class_guards import class_check
from .guards import ANY_ARRAY, GUARD_TYPES, Guard, fresh, guard_fits
from .kind import LEAF_TYPES, TABLE

LEAVES = sentinel("all leaves")
SAME = sentinel("all the very objects")

get_attr = object.__getattribute__
_DICT = operator.attrgetter("__dict__")
"""An object's ``__dict__`` (through its class's lookup: only for classes
that keep ``object``'s, where it is the very dict the walk reads)."""
_DICT_TYPE = frozenset({dict})


class _Items(Guard):
    """The guards of a container's items, and how to check them all."""

    __slots__ = ("items", "mode", "batch")

    def __init__(self, items: tuple):
        self.items = items
        self.batch = None
        if items and all(x is ANY_ARRAY for x in items):
            self.mode = LEAVES
        elif not any(x is ANY_ARRAY or type(x) in GUARD_TYPES for x in items):
            self.mode = SAME
        else:
            self.mode = None
            if all(type(x) is ObjectGuard and x.state.mode is SAME for x in items):
                self.batch = _Objects(items)
            elif all(type(x) is DictGuard and x.mode is LEAVES for x in items):
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
            if x is not expected and not guard_fits(x, expected, leaves, sinks, seen):
                return False
        return True


class _Objects:
    """Plain objects whose attributes were all atoms (logits processors):
    re-checked all at once, in C-level passes over their ``__dict__``s
    (types, sizes, then every name and value by identity), instead of an
    object at a time; with the C accelerator built, in one pass of C."""

    __slots__ = ("types", "kinds", "states", "sizes", "names", "values")

    def __init__(self, items):
        self.types = [x.cls for x in items]
        self.kinds = tuple({x.cls: x.kind for x in items}.items())
        # User classes' states (see .classes), each re-checked once for all its objects.
        self.states = tuple({x.cls: x.cls_state for x in items if x.cls_state}.values())
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
            if TABLE.get(cls) is not kind:
                return False
            if cls.__getattribute__ is not get_attr:
                return None  # _DICT would not read the real __dict__: object by object
        for state in self.states:
            if not state.holds(sinks):
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


def all_fresh(ids: list, sinks, seen) -> bool:
    """Numbers ``ids`` in order as :func:`.guards.fresh` would one at a time;
    False if the walk would key any of them otherwise (met before, twice
    here, or a side channel)."""
    if not seen.keys().isdisjoint(ids) or (sinks and not sinks.keys().isdisjoint(ids)):
        return False
    n = len(seen)
    seen.update(zip(ids, count(n)))
    return len(seen) == n + len(ids)


class TupleGuard(_Items):
    """A tuple or NamedTuple of this type whose items fit these guards (a
    tuple is not numbered, but its items may be); for a user NamedTuple, the
    class's state (see :mod:`.classes`) still holding."""

    __slots__ = ("type", "cls_state")
    numbers = True
    native = "tuple"

    def __init__(self, tp, items, cls_state=None):
        super().__init__(items)
        self.type, self.cls_state = tp, cls_state

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not self.type or len(v) != len(self.items):
            return False
        if self.cls_state is not None and not self.cls_state.holds(sinks):
            return False
        return self.items_fit(v, leaves, sinks, seen)

    def emit(self, w, i, v):
        n = len(self.items)
        w.fail_if(i, f"type({v}) is not {w.const(self.type)} or len({v}) != {n}")
        if self.cls_state is not None:
            w.fail_if(i, f"not {w.const(self.cls_state)}.holds(sinks)")
        w.items(i, self, v, [f"{v}[{k}]" for k in range(n)])

    def spec(self, s):
        # The accelerator reads a NamedTuple's items as a tuple's; a class
        # that iterates otherwise is left to Python.
        if self.type.__iter__ is not tuple.__iter__ or self.type.__len__ is not tuple.__len__:
            raise s.refused
        check = None if self.cls_state is None else class_check(self.cls_state, s)
        return (self.mark, self.type, s.items(self.items), check)


class ListGuard(_Items):
    """A list (not a side channel) whose items fit these guards."""

    __slots__ = ()
    numbers = True
    native = "list"

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not list or len(v) != len(self.items) or not fresh(v, sinks, seen):
            return False
        return self.items_fit(v, leaves, sinks, seen)

    def emit(self, w, i, v):
        n = len(self.items)
        w.fail_if(i, f"type({v}) is not list or len({v}) != {n}")
        w.fresh(i, v, container=True)
        w.items(i, self, v, [f"{v}[{k}]" for k in range(n)])

    def spec(self, s):
        return (self.mark, s.items(self.items))


def same_names(d: dict, names: tuple) -> bool:
    """Whether ``d``'s keys are ``names``, in order, as strings: equal
    strings built anew, where the very ones (interned names) did not come."""
    return all(type(k) is str for k in d) and tuple(d) == names


def has_names(d: dict, names: tuple) -> bool:
    """Whether ``d``'s keys are ``names``, in order. Literal and attribute
    names are interned, so the very strings come back; equal strings built
    anew are compared as such."""
    return len(d) == len(names) and (all(map(operator.is_, d, names)) or same_names(d, names))


class DictGuard(_Items):
    """A dict (not a side channel) with these string keys, in this order,
    whose values fit these guards."""

    __slots__ = ("keys",)
    numbers = True
    native = "dict"

    def __init__(self, keys, items):
        super().__init__(items)
        self.keys = keys

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not dict or not has_names(v, self.keys):
            return False
        return fresh(v, sinks, seen) and self.items_fit(v.values(), leaves, sinks, seen)

    def emit(self, w, i, v):
        keys = w.const(self.keys)
        w.fail_if(i, f"type({v}) is not dict or len({v}) != {len(self.keys)}")
        w.fail_if(i, f"not all(map(_is, {v}, {keys})) and not {w.const(same_names)}({v}, {keys})")
        w.fresh(i, v, container=True)
        w.items(i, self, f"{v}.values()", [f"{v}[{w.const(k)}]" for k in self.keys])

    def spec(self, s):
        return (self.mark, self.keys, s.items(self.items))


class ObjectGuard(Guard):
    """An instance of this class, still of this kind, whose ``__dict__``
    fits this DictGuard (an HF logits processor, a config object); for a
    user class, the class's state (see :mod:`.classes`) still holding."""

    __slots__ = ("cls", "kind", "state", "cls_state")
    numbers = True
    native = "object"

    def __init__(self, cls, kind, state, cls_state=None):
        self.cls, self.kind, self.state, self.cls_state = cls, kind, state, cls_state

    def fits(self, v, leaves, sinks, seen) -> bool:
        cls = self.cls
        if type(v) is not cls or id(v) in seen or TABLE.get(cls) is not self.kind:
            return False
        if self.cls_state is not None and not self.cls_state.holds(sinks):
            return False
        seen[id(v)] = len(seen)
        return self.state.fits(get_attr(v, "__dict__"), leaves, sinks, seen)

    def emit(self, w, i, v):
        cls = w.const(self.cls)
        w.fail_if(i, f"type({v}) is not {cls} or _TABLE.get({cls}) is not {w.const(self.kind)}")
        if self.cls_state is not None:
            w.fail_if(i, f"not {w.const(self.cls_state)}.holds(sinks)")
        w.fresh(i, v, container=False)
        d = w.var()
        w.line(i, f"{d} = {w.const(get_attr)}({v}, '__dict__')")
        self.state.emit(w, i, d)

    def spec(self, s):
        check = None if self.cls_state is None else class_check(self.cls_state, s)
        return (self.mark, self.cls, self.kind, s.value(self.state), check)
