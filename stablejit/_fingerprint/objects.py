"""Kinds of objects: instances keyed by their state, and what falls back to them.

A plain instance is keyed by its type (identity) and its state (``__dict__``
and slots), with the arrays there lifted. A class written to be a key (its
body defines ``__eq__`` and ``__hash__``) is keyed by that equality inside
static arguments. Subclasses of list, dict and tuple that are not pytrees
keep their items' kinds. What has no readable state is hashed through
cloudpickle, or else keyed by identity.
"""

from __future__ import annotations

import copy
import logging
import threading
import types
from collections.abc import Callable
from typing import Any

import xxhash

from .._markers import ByOwnEquality, IdRef
from .._registry import Memo
from .classes import class_key, is_user_class, type_state
from .container_guards import DictGuard, ObjectGuard
from .kind import MISSING, NO_GUARD, TABLE, Kind, keys
from .places import ATTR, ITEM
from .records import guard_of
from .sinks import sink_key, sink_of
from .values import Scalar


class Subclass(Kind):
    """Subclasses of list, dict and tuple that are not pytrees (``Counter``):
    their type by identity, their items as the base kind's, their ``__dict__``."""

    name = "container subclass"

    def __init__(self, cls, base: Kind):
        self.base = base
        self.new = cls.__new__
        self.cyclic = base.cyclic
        self.has_dict = any("__dict__" in c.__dict__ for c in cls.__mro__)

    def key(self, w, v):
        d = object.__getattribute__(v, "__dict__") if self.has_dict else None
        return (class_key(w, type(v)), self.base.key(w, v), w.walk(d) if d else None)

    def children(self, w, v):
        d = object.__getattribute__(v, "__dict__") if self.has_dict else {}
        return self.base.children(w, v) + [(f".{k}", x) for k, x in d.items()]

    def rebuild(self, r, v, i):
        if r.in_place and self.cyclic:  # a list or dict: its items in place
            self.base.rebuild(r, v, i)
            d = object.__getattribute__(v, "__dict__") if self.has_dict else None
            if d:
                r.walk(d)
            return v
        cls = type(v)
        items = self.base.rebuild(r, v, i)
        new = self.new(cls, items) if isinstance(items, tuple) else self.new(cls)
        if isinstance(items, list):
            new.extend(items)
        elif isinstance(items, dict):
            new.update(items)
        r.memo[id(v)] = new
        d = object.__getattribute__(v, "__dict__") if self.has_dict else None
        if d:
            object.__getattribute__(new, "__dict__").update(r.walk(d))
        return new


def stored_dict(cls) -> bool:
    """Whether ``cls``'s instances' ``__dict__`` is the one they store (the
    attribute CPython gives a class), not one its code computes."""
    for c in cls.__mro__:
        if "__dict__" in c.__dict__:
            return type(c.__dict__["__dict__"]) is types.GetSetDescriptorType
    return False


def slot_names(cls) -> tuple[str, ...]:
    names = []
    for c in cls.__mro__:
        slots = c.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        names.extend(s for s in slots if s not in ("__dict__", "__weakref__"))
    return tuple(names)


def attributes(v) -> list[tuple[Any, Any, str, Any]]:
    """``(place, holder, name, value)`` of each attribute ``v`` holds, in its
    ``__dict__`` or its slots (see :mod:`.places`), around any ``__getattr__``."""
    try:
        d = object.__getattribute__(v, "__dict__")
    except AttributeError:  # slots only
        d = {}
    out = [(ITEM, d, k, x) for k, x in d.items()]
    for name in slot_names(type(v)):
        try:
            out.append((ATTR, v, name, object.__getattribute__(v, name)))
        except AttributeError:  # an empty slot
            pass
    return out


class Object(Kind):
    """Plain instances, by type (identity) and state (``__dict__``, slots).

    Arrays in the state are lifted; methods are looked up on the class, which
    is keyed by identity.
    """

    name = "object"
    cyclic = True

    def __init__(
        self,
        cls,
        derived: dict[str, Callable[[Any], Any]] | None = None,
        skip: frozenset[str] = frozenset(),
    ):
        self.slots = slot_names(cls)
        self.has_dict = any("__dict__" in c.__dict__ for c in cls.__mro__)
        # Attributes keyed by what they mean rather than what they hold: name
        # -> function of the object; and attributes that never change what is
        # traced, left out (see classify.LIBRARY_KINDS).
        self.derived = derived
        self.skip = skip

    def _attrs(self, w, v):
        """``(own __dict__ or None, the attributes keys see as (name, value)
        pairs or None, slots)``.

        The pairs are None when keys see the ``__dict__`` itself. A kind that
        skips or derives attributes keys them as pairs, never as a new dict:
        a temporary dict would be numbered as a cyclic value of the walk, and
        a later one at the same address would read as a back reference to it.
        Side channels of the ``__dict__`` (see .sinks) are left out, as a
        dict's are.
        """
        d = object.__getattribute__(v, "__dict__") if self.has_dict else None
        slots = tuple([getattr(v, s, MISSING) for s in self.slots])
        if d is None or not (self.derived or self.skip):
            return d, None, slots
        skip = self.skip | (sink_of(w, d) or frozenset())
        derived = self.derived or {}
        pairs = [(k, derived[k](v) if k in derived else x) for k, x in d.items() if k not in skip]
        return d, pairs, slots

    def key(self, w, v):
        ref = w.enter(v)
        if ref is not None:
            return ref
        d, pairs, slots = self._attrs(w, v)
        walk = w.walk
        cls = class_key(w, type(v))
        if pairs is None:
            return (cls, walk(d), tuple([walk(s) for s in slots]))
        state = (tuple([k for k, _ in pairs]), keys(w, [x for _, x in pairs]))
        if sink_of(w, d):
            state += (sink_key(d),)
        return (cls, state, tuple([walk(s) for s in slots]))

    def children(self, w, v):
        d, pairs, slots = self._attrs(w, v)
        if pairs is None and d is not None:
            skip = sink_of(w, d) or ()
            pairs = [(k, x) for k, x in d.items() if k not in skip]
        attrs = [(f".{k}", x) for k, x in pairs or ()]
        attrs += [(f".{n}", s) for n, s in zip(self.slots, slots, strict=True)]
        # A user class is part of the key (see .classes): what changed there is named.
        return attrs + ([(".__class__", type(v))] if is_user_class(type(v)) else [])

    def watched(self, v):
        # A kind that keys pairs never visits the __dict__ as a dict, so the
        # snapshot of a trace's writes (see .snapshot) must be told of it.
        if self.has_dict and (self.derived or self.skip):
            return object.__getattribute__(v, "__dict__")
        return None

    def node_token(self, v):
        return IdRef(type(v))

    def guard(self, v, k, records):
        # Re-checked through its __dict__ alone: kinds that derive or skip
        # attributes, or keep some in slots, take the walk; so do classes
        # whose __dict__ is computed (a new dict on each read, whose number
        # a check could not hold to what the walk numbered).
        if (
            type(self) is not Object
            or self.derived
            or self.skip
            or self.slots
            or not stored_dict(type(v))
        ):
            return NO_GUARD
        state = guard_of(object.__getattribute__(v, "__dict__"), k[1], records)
        if type(state) is not DictGuard:
            return NO_GUARD
        return ObjectGuard(type(v), self, state, type_state(k[0]))

    def rebuild(self, r, v, i):
        d, pairs, slots = self._attrs(r, v)
        walk = r.walk
        if r.in_place:
            # Its own __dict__ in place (a dict), and its slots: around the
            # class's __setattr__, as the state is only lent to the trace.
            r.memo[id(v)] = v
            if pairs is None:
                walk(d)
            else:  # what the walk substituted goes to the object's own __dict__
                for k, x in pairs:
                    nx = walk(x)
                    if nx is not x:
                        r.put(ITEM, d, k, nx)
            for name, s in zip(self.slots, slots, strict=True):
                ns = walk(s)
                if ns is not s:
                    r.put(ATTR, v, name, ns)
            return v
        cls = type(v)
        new = object.__new__(cls) if cls.__new__ is object.__new__ else copy.copy(v)
        r.memo[id(v)] = new
        if d is not None:
            if pairs is None:  # the __dict__, visited as the key walk visits it
                changed = {k: x for k, x in walk(d).items() if x is not d[k]}
            else:
                changed = {k: nx for k, x in pairs if (nx := walk(x)) is not x}
            target = object.__getattribute__(new, "__dict__")
            target.update(d)
            target.update(changed)
        for name, s in zip(self.slots, slots, strict=True):
            ns = walk(s)
            if ns is not MISSING:
                object.__setattr__(new, name, ns)
        return new


class CopiedObject(Object):
    """Objects keyed by state like plain ones, but rebuilt as copies even at
    trace time, never in place: JAX's ``ClosedJaxpr``, which JAX treats as
    immutable and caches what it derives from by identity. Its constants
    swapped for the trace's tracers in place (and back after), a jaxpr JAX
    derived meanwhile and cached kept those tracers, and a later lowering met
    one as a constant ("No constant handler for type: DynamicJaxprTracer":
    diffrax's events, whose root find takes optimistix's closure-converted
    function, a ClosedJaxpr over the outer trace's values)."""

    def rebuild(self, r, v, i):
        if not r.in_place:
            return super().rebuild(r, v, i)
        r.in_place = False  # the copy's parts are copies too (its constants' list)
        try:
            return super().rebuild(r, v, i)
        finally:
            r.in_place = True


_LOG = logging.getLogger("stablejit")
_WARNED = Memo(1024)  # types whose state could not be read, said once
_WARN_LOCK = threading.Lock()


class Opaque(Kind):
    """Objects with no readable state: hashed through cloudpickle, else identity."""

    name = "opaque object"

    def key(self, w, v):
        import cloudpickle  # on first need: most programs never get here

        try:
            data = cloudpickle.dumps(v, protocol=5)
        except Exception as e:  # noqa: BLE001 - any pickling failure means "cannot read"
            with _WARN_LOCK:
                first = type(v) not in _WARNED
                _WARNED.put(type(v), None)
            if first:
                # A log record, not a warning: suites that turn warnings into
                # errors would fail on code that runs (see the diagnostics' explain).
                _LOG.warning(
                    "stablejit cannot read the state of %s objects (%.80s); they are keyed "
                    "by identity, so mutating one in place is not seen.",
                    type(v).__qualname__,
                    e,
                )
            return IdRef(v)
        return ("pickled", type(v), xxhash.xxh3_128_digest(data))


OPAQUE = Opaque()


def plain_kind(cls, v) -> Kind:
    """The kind of a value that is not a registered pytree node, by its class."""
    if issubclass(cls, (int, str, bytes)):
        return Scalar()
    if issubclass(cls, (list, dict, tuple)):
        base = list if issubclass(cls, list) else dict if issubclass(cls, dict) else tuple
        return Subclass(cls, TABLE[base])
    if defines_equality(cls):
        return OwnEquality(cls)
    try:
        has_state = hasattr(v, "__dict__") or slot_names(cls)
    except Exception:  # noqa: BLE001 - its attribute access raises: not readable
        return OPAQUE
    return Object(cls) if has_state else OPAQUE


def defines_equality(cls) -> bool:
    """Whether ``cls`` was written to be a key: one class body defines both
    ``__eq__`` and ``__hash__`` (dataclasses' generated ones do not count)."""
    for c in cls.__mro__:
        if c is object:
            return False
        eq = c.__dict__.get("__eq__")
        if eq is None:
            continue
        code = getattr(eq, "__code__", None)
        generated = code is None or code.co_filename.startswith("<")
        return not generated and c.__dict__.get("__hash__") is not None
    return False


class OwnEquality(Kind):
    """Objects of a class written to be a key (flax's ``_HashableProxy``, a
    config with ``__eq__``/``__hash__``).

    Inside a static argument (``w.static``) they are keyed by their own
    equality, as ``jax.jit`` keys static arguments: the class says what
    matters. Anywhere else, and where they cannot be hashed, by their state,
    as plain objects: a flax ``Scope``'s equality is the identity of the
    variables it holds, which are arrays to lift.
    """

    name = "object"
    cyclic = True

    def __init__(self, cls):
        self.state = Object(cls)

    def key(self, w, v):
        if w.static:
            try:
                h = hash(v)
            except Exception:  # noqa: BLE001 - a failing __hash__: not a key after all
                pass
            else:
                return (class_key(w, type(v)), ByOwnEquality(v, h))
        return self.state.key(w, v)

    def rebuild(self, r, v, i):
        return self.state.rebuild(r, v, i)  # only values keyed by state hold leaves

    def children(self, w, v):
        return self.state.children(w, v)

    def node_token(self, v):
        return self.state.node_token(v)

    def guard(self, v, k, records):
        # Keyed by state (outside static arguments: a record is matched only
        # in walks of the kind that built it, see Record.static), it is
        # re-checked by state, as a plain object, under this kind.
        if type(k[1]) is ByOwnEquality:
            return NO_GUARD  # keyed by its own equality (in a static argument)
        g = self.state.guard(v, k, records)
        return (
            ObjectGuard(g.cls, self, g.state, g.cls_state) if type(g) is ObjectGuard else NO_GUARD
        )


_NOT_PYTREE = Memo(4096)  # class → its kind were it not a pytree node


def not_a_pytree(v) -> Kind:
    """The kind ``v`` would have if its class were not a pytree node."""
    cls = type(v)
    kind = _NOT_PYTREE.get(cls)
    if kind is None:
        kind = _NOT_PYTREE.put(cls, plain_kind(cls, v))
    return kind
