"""Pytree nodes whose flatten only reads their fields: re-checked through those fields.

A :class:`.pytree_guards.PytreeGuard` calls the node's flatten on every
check: for a closure over an nnx model, flax's ``_pytree__flatten`` (a sort
of the module's ``__dict__``) costs microseconds per layer, more than all
the rest of a call, and a Python call the C accelerator cannot make for it.

Some flattens are declared *pure* (:data:`PURE`): what they return is a
function of the node's class and of the fields they read (``reads``): its
``__dict__``'s names and values, or named slots, the values placed by
identity, never read into; or a slot's dict, read into item by item (an nnx
Variable's metadata). For such a node, what the flatten returned is pulled
back onto those fields once (:func:`plan_of`): each child, and each part of
the metadata, is the very value of a field, or a tuple of such, or a
constant of the flatten (a name, an atom, a library's own object). Then
:class:`FieldsGuard` re-checks the node without calling its flatten: its
type, its ``__dict__``'s names, and each field with the guard of where the
flatten put it, in the order the walk met them there (so arrays are taken
and objects numbered as the walk did). A flatten that reads anything else
must not be declared: its node would be stale.

A declaration is a library's code read and trusted: flax nnx's ``Pytree``
(``Module``, ``List``…), its ``Variable`` and ``PytreeState``, equinox's
``Module``. Every other node keeps its flatten.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import textwrap
import types
from typing import NamedTuple

from .._registry import Memo
from .class_guards import class_check
from .codegen import FAIL
from .container_guards import TupleGuard, get_attr, has_names, same_names
from .guards import ANY_ARRAY, ATOM_TYPES, GUARD_TYPES, Guard, guard_fits, same_atom
from .objects import stored_dict
from .pytree_guards import NodeChecks, PytreeGuard, weight
from .pytree_guards import node_guard as flatten_guard


class Slot(NamedTuple):
    """A read of a flatten: the slot ``name``, placed by identity, or (if
    ``items``) a dict read into item by item."""

    name: str
    items: bool = False


DICT = Slot("__dict__")
"""A read of a flatten: the node's ``__dict__``, its names and values."""

PURE: dict = {}
"""Declared flattens: the function → its reads (a tuple of :class:`Slot`)."""


# A library's flattens, declared from their source as read (flax 0.12.8, equinox 0.13.8),
# by where they are defined and a digest of that source: a release that changes one is
# not trusted (its nodes keep their flatten, correct and slower) until it is read again.
_FLAX_READS = {
    # vars(self), sorted; which are children: _pytree__nodes (in the __dict__, else the
    # class's); _pytree__has_int_keys: the class's.
    ("flax.nnx.pytreelib", "Pytree._pytree__flatten"): ("877338945102e64b", (DICT,)),
    # Its two properties return these slots.
    ("flax.nnx.pytreelib", "_flatten_pytree_state"): (
        "24fe1e7cc83ee3b1",
        (Slot("_initializing"), Slot("_is_setup")),
    ),
    ("flax.nnx.variablelib", "_variable_flatten"): (
        "1e3e957f02025930",
        (Slot("_raw_value"), Slot("_var_metadata", items=True)),
    ),
}
# equinox generates a flatten per class from one template: __dict__.get of each field,
# len(__dict__). (Module's __getattribute__ hands __dict__ through unchanged.)
_EQUINOX_TEMPLATE = "635fcf9dadd7e80e"

_TRUSTED = Memo(1024)
"""A library's flatten → its reads, or None: its source read once."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _library_reads(flatten):
    """The reads of a library's flatten declared here, if its source is the
    one read (so that the library need not be imported to declare it), or None."""
    try:
        return _TRUSTED[flatten]
    except KeyError:
        pass
    except TypeError:  # an unhashable callable
        return None
    return _TRUSTED.put(flatten, _declared(flatten))


def _declared(flatten):
    where = (getattr(flatten, "__module__", None), getattr(flatten, "__qualname__", None))
    if where in _FLAX_READS:
        digest, reads = _FLAX_READS[where]
        try:
            source = textwrap.dedent(inspect.getsource(flatten))
        except (OSError, TypeError):  # no source to check it against
            return None
        return reads if _digest(source) == digest else None
    code = getattr(flatten, "__code__", None)
    flat = sys.modules.get("equinox._module._flatten")
    if (
        code is not None
        and flat is not None
        and code.co_filename.startswith("<generated_flatten_")
        and getattr(flatten, "__globals__", {}).get("MISSING") is flat.MISSING
        and _digest(getattr(flat, "_FLAT_CODE", "")) == _EQUINOX_TEMPLATE
    ):
        return (DICT,)
    return None


def reads_of(flatten):
    """What ``flatten`` reads if it is declared pure, else None."""
    try:
        reads = PURE.get(flatten)
    except TypeError:  # an unhashable callable
        return None
    return reads if reads is not None else _library_reads(flatten)


class ItemsGuard(Guard):
    """A dict holding these very keys and values, in this order: a slot's
    dict that a flatten reads into, whose values are atoms or tuples of
    them (never numbered: the walk met only what the flatten made of it)."""

    __slots__ = ("keys", "values")
    native = "items"

    def __init__(self, keys, values):
        self.keys, self.values = keys, values

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not dict or not has_names(v, self.keys):
            return False
        return all(x is e or same_atom(x, e) for x, e in zip(v.values(), self.values, strict=True))

    def emit(self, w, i, v):
        w.fail_if(i, f"not {w.const(self)}.fits({v}, leaves, sinks, None)")

    def spec(self, s):
        return (self.mark, self.keys, self.values)


class FieldsGuard(Guard, NodeChecks):
    """A node of this type, still of this kind, whose ``__dict__`` has these
    ``names`` (None: not read), and whose fields fit ``plan``: ``(where,
    guard)`` pairs, ``where`` a name of the ``__dict__`` or a slot's
    descriptor, in the order the walk met them in the flatten's output."""

    __slots__ = ("type", "kind", "cls_state", "names", "plan", "weight", "check")
    numbers = True
    native = "fields"

    def __init__(self, tp, kind, names, plan, cls_state=None):
        self.type, self.kind, self.names, self.plan = tp, kind, names, plan
        self.cls_state = cls_state
        self.weight = 1 + sum(weight(g) for _, g in plan)
        self.check = None

    def fits(self, v, leaves, sinks, seen) -> bool:
        if not self.type_fits(v, sinks):
            return False
        d = None
        names = self.names
        if names is not None:
            d = get_attr(v, "__dict__")
            if not has_names(d, names):
                return False
        tp = self.type
        for where, guard in self.plan:
            if type(where) is str:
                x = d[where]
            else:
                try:
                    x = where.__get__(v, tp)
                except AttributeError:  # an empty slot
                    return False
            if x is not guard and not guard_fits(x, guard, leaves, sinks, seen):
                return False
        return True

    def emit_body(self, w, i, v):
        self.emit_type(w, i, v)
        names = self.names
        d = w.var()
        if names is not None:
            n = w.const(names)
            w.line(i, f"{d} = {w.const(get_attr)}({v}, '__dict__')")
            w.fail_if(
                i,
                f"len({d}) != {len(names)} or (not all(map(_is, {d}, {n}))"
                f" and not {w.const(same_names)}({d}, {n}))",
            )
        for where, guard in self.plan:
            x = w.var()
            if type(where) is str:
                w.line(i, f"{x} = {d}[{where!r}]")
            else:
                w.line(i, "try:")
                w.line(i + 1, f"{x} = {w.const(where)}.__get__({v}, {w.const(self.type)})")
                w.line(i, "except AttributeError:")
                w.line(i + 1, FAIL)
            w.value(i, guard, x)

    def spec(self, s):
        check = None if self.cls_state is None else class_check(self.cls_state, s)
        # (A field of the __dict__ by its place there: the C case holds the
        # values it read in the names' check, and looks none up.)
        place = {name: i for i, name in enumerate(self.names or ())}
        plan = tuple([(place.get(where, where), s.value(guard)) for where, guard in self.plan])
        return (self.mark, self.type, self.kind, check, self.names, plan)


def node_guard(kind, v, k, data, children, records, item_guards):
    """The guard of node ``v`` (see :func:`.pytree_guards.node_guard`, whose
    arguments these are): a :class:`FieldsGuard` where its flatten is
    declared pure and what it returned pulls back onto what it reads, else
    the guard that calls its flatten."""
    guard = flatten_guard(kind, v, k, data, children, records, item_guards)
    if type(guard) is not PytreeGuard:
        return guard
    reads = reads_of(guard.flatten)
    if reads is None:
        return guard
    try:
        names, plan = plan_of(
            v, reads, (data[1], guard.aux), zip(children, guard.items, strict=True)
        )
    except _Impure:
        return guard
    return FieldsGuard(type(v), kind, names, plan, guard.cls_state)


class _Impure(Exception):
    """What a declared flatten returned does not pull back onto its reads."""


def plan_of(v, reads, aux, children):
    """``(names, plan)`` of a :class:`FieldsGuard` for node ``v``, whose
    declared flatten ``reads`` these fields and returned ``aux`` (metadata,
    guard) and ``children`` ((child, guard) pairs), met in that order."""
    tp = type(v)
    names = None
    sources = []  # (where, value) of each field placed by identity
    plan = []  # (where, guard), in the order the walk met them
    for read in reads:
        if read is DICT:
            if not stored_dict(tp) or not _hands_dict_through(tp.__getattribute__):
                raise _Impure
            d = get_attr(v, "__dict__")
            names = tuple(d)
            if not all(type(n) is str for n in names):
                raise _Impure
            sources += d.items()
            continue
        where = _slot(tp, read.name)
        try:
            x = where.__get__(v, tp)
        except AttributeError:
            raise _Impure from None
        if read.items:  # read into: first, as it numbers and takes nothing
            plan.append((where, _items_guard(x)))
        else:
            sources.append((where, x))

    def pull(x, guard):
        hits = [where for where, value in sources if value is x]
        if hits:
            # A value in several fields: each is checked (an extra check only
            # misses more), unless the check numbers or takes what it meets.
            if len(hits) > 1 and _acts(guard):
                raise _Impure
            for where in hits:
                if _acts(guard) or not any(w is where and g is guard for w, g in plan):
                    plan.append((where, guard))
        elif type(x) is tuple and type(guard) is TupleGuard and guard.type is tuple:
            for item, g in zip(x, guard.items, strict=True):  # made by the flatten
                pull(item, g)
        elif not _constant(guard):
            raise _Impure  # made by the flatten from what it does not declare

    pull(*aux)
    for child, guard in children:
        pull(child, guard)
    return names, tuple(plan)


def _acts(guard) -> bool:
    """Whether checking ``guard`` takes arrays or numbers what it meets."""
    return guard is ANY_ARRAY or type(guard) in GUARD_TYPES


def _constant(guard) -> bool:
    """Whether ``guard`` holds a constant of a flatten: a value kept by
    identity or an atom, tuples of them, or a node of nothing (equinox's
    MISSING), which checks nothing that a field could change."""
    if not _acts(guard):
        return True
    if type(guard) is TupleGuard:
        return all(map(_constant, guard.items))
    return type(guard) is PytreeGuard and not guard.items and _constant(guard.aux)


def _hands_dict_through(getattribute) -> bool:
    """Whether a class's ``__getattribute__`` reads ``__dict__`` as
    ``object``'s does (a flatten reads the one this guard reads): object's
    own, or equinox Module's, which hands magic names through unchanged."""
    return getattribute is object.__getattribute__ or (
        getattr(getattribute, "__module__", None) == "equinox._module._module"
        and getattr(getattribute, "__qualname__", None) == "Module.__getattribute__"
    )


def _slot(tp, name):
    """The descriptor of slot ``name`` as ``tp``'s instances read it."""
    for c in tp.__mro__:
        if name in c.__dict__:
            found = c.__dict__[name]
            if type(found) is types.MemberDescriptorType and tp.__getattribute__ is (
                object.__getattribute__
            ):
                return found
            break
    raise _Impure


def _items_guard(d) -> ItemsGuard:
    if type(d) is not dict or not all(type(k) is str for k in d):
        raise _Impure
    values = tuple(d.values())
    if not all(map(_immutable, values)):
        raise _Impure
    return ItemsGuard(tuple(d), values)


def _immutable(x) -> bool:
    """An atom, or a tuple of such: the same object has the same key."""
    if type(x) is tuple:
        return all(map(_immutable, x))
    return type(x) in ATOM_TYPES
