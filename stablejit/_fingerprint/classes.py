"""User classes keyed by their contents, so class-level state is never stale.

A trace reads a class whenever it calls a method, reads a class attribute,
or goes through a property or a base: ``M.s = 3.0``, a method replaced on the
class, a property's global rebound, or a class-level list mutated in place
must all retrace. So a class defined in user code (see :func:`is_user_class`)
is keyed by its identity *and* its contents: its own attributes (boilerplate
left out), its bases and its metaclass, walked like any value. Classes of
installed libraries stay keyed by identity, as functions of libraries are
(their registries, such as flax's of graph node types, change as users
define classes, and must never retrace user functions).

A class's contents are keyed in a walk of their own (a :class:`ClassState`),
not numbered in the enclosing walk, so that the state is remembered per
class and re-checked on its own: a class met again costs a check of what
its state says can have changed, not a walk:

* its own ``__dict__`` and bases, by CPython's type version tag (the C
  accelerator reads it; CPython clears it whenever the class or a base is
  assigned an attribute), else item by item by identity;
* what the tag cannot see, re-checked by the guards of :mod:`.guards`: the
  globals its methods read, containers and objects it holds (mutable in place),
  and its user bases' and metaclass's own states.

Arrays a class holds are keyed by identity, as ``jax.jit`` bakes them.
"""

from __future__ import annotations

import sys

import numpy as np

from .._markers import IdRef
from .._registry import Memo
from .bake import bytes_digest
from .class_guards import (
    ClassGuard,
    ClassState,
    DescriptorGuard,
    Within,
    building,
    own_items,
    type_tag,
)
from .guards import ATOM_TYPES, HostArrayGuard
from .kind import LEAF, NO_GUARD, Kind, keys
from .library import is_library_file
from .records import guard_of

_HEAPTYPE = 1 << 9
_USER = Memo(4096)  # class -> whether it is a user class


def is_user_class(cls: type) -> bool:
    """Whether ``cls`` was defined in user code: a class statement (or
    ``type()`` call) whose module is not an installed library's (see
    :mod:`.library`). Built-in and extension types are libraries'."""
    user = _USER.get(cls)
    if user is None:
        user = _USER.put(cls, _defined_by_user(cls))
    return user


def _defined_by_user(cls: type) -> bool:
    if not cls.__flags__ & _HEAPTYPE:
        return False
    name = cls.__dict__.get("__module__")
    if name == "builtins":
        # A class statement run with globals that hold no __name__ (``exec(src, {})``):
        # Python names the builtins module then. No type of that module is a heap type,
        # and a C extension's names no module in its dict unless it spells one out.
        return True
    module = sys.modules.get(name) if type(name) is str else None
    file = getattr(module, "__file__", None)
    if type(file) is str:
        return not is_library_file(file)
    # No file: the interpreter's own modules (built in, frozen) are a
    # library's; any other (exec'd code, a module made at run time, an
    # interactive __main__) is user code, keyed by contents to be safe.
    origin = getattr(getattr(module, "__spec__", None), "origin", None)
    return name not in sys.builtin_module_names and origin not in ("built-in", "frozen")


class ClassKey:
    """A user class in a key: the class and its contents' key, hashed once,
    with the state it came from (not compared: what a guard re-checks)."""

    __slots__ = ("cls", "content", "hash", "state")

    def __init__(self, cls, content, state):
        self.cls, self.content, self.state = cls, content, state
        self.hash = hash((id(cls), content))

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        return (
            type(other) is ClassKey
            and other.cls is self.cls
            and (other.content is self.content or other.content == self.content)
        )

    def __repr__(self):
        return f"<class {self.cls.__qualname__} by contents>"


_STATES = Memo(4096)  # user class -> its last state that stands alone


def _contents(cls, sinks, fresh) -> tuple:
    """``(content key, parts, walk, within, tag)`` of ``cls``'s contents,
    walked on their own; ``parts``: ``(where, value, key)`` of each, in walk
    order; ``within``: whether they refer to a class whose keying encloses
    this one; ``tag``: its version tag before they were read."""
    chain = building()
    nested = cls in chain  # (re-checked within its own keying)
    if not nested:
        chain[cls] = False
    tag = type_tag(cls)  # before reading: a change while it is read shows
    try:
        w = fresh()
        w.sinks = sinks
        w.seen[id(cls)] = 0
        w.alive.append(cls)
        names, values = own_items(cls)
        value_keys = keys(w, values)
        base_keys = tuple([w.walk(b) for b in cls.__bases__])
        meta_key = w.walk(type(cls))
    finally:
        within = chain[cls] if nested else chain.pop(cls)
    content = (names, value_keys, base_keys, meta_key, tuple(map(_baked, w.leaves)))
    parts = [*zip(names, values, value_keys, strict=True)]
    parts += [(i, b, k) for i, (b, k) in enumerate(zip(cls.__bases__, base_keys, strict=True))]
    parts.append((None, type(cls), meta_key))
    return content, parts, w, within, tag


def _baked(a):
    """The key of an array a class holds, baked into the trace: a NumPy
    array (writable in place) by its contents, any other by identity."""
    return ("numpy", *bytes_digest(a)) if type(a) is np.ndarray else IdRef(a)


def state_of(cls, w):
    """The state of user class ``cls`` now: the one remembered if it holds,
    else a new one. Met within the keying of its own contents (a method that
    reads its class, ``super()``), an :class:`IdRef`: the contents are keyed
    there already, and re-checked by the state being made (``w``: the walk
    asking, whose side channels it keys with)."""
    sinks, fresh = w.sinks, w.fresh
    chain = building()
    if cls in chain:
        # Classes keyed since (inside this one's keying) refer to it by
        # identity: their states stand only within its own.
        later = False
        for c in chain:
            chain[c] = chain[c] or later
            later = later or c is cls
        return IdRef(cls)
    state = _STATES.get(cls)
    if state is not None and state.holds(sinks):
        return state
    content, parts, sub, within, tag = _contents(cls, sinks, fresh)
    deep: list | None = []
    if sum(k is LEAF for _, _, k in parts) != len(sub.leaves):
        deep = None  # arrays inside what it holds: the contents walked again
    else:
        for where, v, k in parts:
            if k is LEAF and type(v) is np.ndarray:  # (written in place, unseen by the tag)
                deep.append((where, HostArrayGuard(v)))
                continue
            if k is LEAF or k is v or type(v) in ATOM_TYPES:
                continue  # the very object: the tag, or the identity check, sees it
            guard = guard_of(v, k, sub.records)
            if guard is NO_GUARD:
                deep = None
                break
            if guard is not v:
                deep.append((where, guard))
    state = ClassState()
    state.cls, state.meta, state.bases = cls, type(cls), cls.__bases__
    state.names, state.values = content[0], tuple(v for _, v, _ in parts[: len(content[0])])
    state.deep = None if deep is None else tuple(deep)
    state.key = ClassKey(cls, content, state)
    state.tag = tag
    state.rewalk = lambda c, s: _contents(c, s, fresh)[0]
    if not within:
        _STATES.put(cls, state)
    return state


def class_key(w, cls):
    """The key of ``cls`` (a class): by identity and, for a user class,
    contents (a :class:`ClassKey`; an :class:`IdRef` within its own)."""
    if not is_user_class(cls):
        return IdRef(cls)
    state = state_of(cls, w)
    if w.sees_classes:
        _visit(w, cls)
    return state if type(state) is IdRef else state.key


def _visit(w, cls) -> None:
    """Walks ``cls``'s contents in ``w``, a walk that watches what it visits
    (the snapshot of what a trace writes, see .snapshot), once: they are
    keyed in a walk of their own, which it would not see."""
    if w.enter(cls) is not None:
        return
    n = len(w.leaves)
    for v in (*own_items(cls)[1], *cls.__bases__, type(cls)):
        w.walk(v)
    del w.leaves[n:]  # (the key is the state's; what the walk took is not the key's)


def type_state(k):
    """What ``k``, a class's key from :func:`class_key`, stands on, for a
    guard to re-check (a :class:`ClassState` or :class:`Within`), or None
    for a class keyed by identity."""
    if type(k) is ClassKey:
        return k.state
    if type(k) is IdRef and isinstance(k.obj, type) and is_user_class(k.obj):
        return Within(k.obj)
    return None


class ClassKind(Kind):
    """Classes as values (a global, a cell): a user class by identity and
    contents, any other as its ``identity`` kind keys it."""

    name = "class"

    def __init__(self, identity: Kind):
        self.identity = identity

    def key(self, w, v):
        if not is_user_class(v):
            return self.identity.key(w, v)
        return class_key(w, v)

    def guard(self, v, k, records):
        state = type_state(k)
        return self.identity.guard(v, k, records) if state is None else ClassGuard(state)

    def children(self, w, v):
        if not is_user_class(v):
            return []
        names, values = own_items(v)
        return [(f".{n}", x) for n, x in zip(names, values, strict=True)]


class Descriptor(Kind):
    """What a class statement's decorators make of its functions (a property,
    a staticmethod, a classmethod, a cached_property): by type and the
    functions they wrap, which hold no ``__dict__`` entry to read them by."""

    name = "descriptor"

    def __init__(self, attrs: tuple[str, ...]):
        self.attrs = attrs

    def key(self, w, v):
        return (type(v), tuple([w.walk(getattr(v, a)) for a in self.attrs]))

    def children(self, w, v):
        return [(f".{a}", getattr(v, a)) for a in self.attrs]

    def guard(self, v, k, records):
        guards = tuple(
            guard_of(getattr(v, a), x, records) for a, x in zip(self.attrs, k[1], strict=True)
        )
        if any(g is NO_GUARD for g in guards):
            return NO_GUARD
        return DescriptorGuard(type(v), self.attrs, guards)
