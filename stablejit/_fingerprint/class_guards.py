"""The guards of classes: a user class's state still holding, and the descriptors it holds.

A user class is keyed by its contents (see :mod:`.classes`); what those
contents were is a :class:`ClassState`, whose ``holds`` tells without a walk
whether they still are: CPython's version tag of the class (read by the C
accelerator, which CPython clears whenever the class or a base is assigned an
attribute) vouches for its own attributes, else they are compared item by
item by identity; what the tag cannot see (the globals its methods read, the
containers and objects it holds) is re-checked by the guards of
:mod:`.guards`. :class:`ClassGuard` is the guard of a class as a value;
objects and NamedTuples of user classes hold their class's state in their
own guards (see :mod:`.container_guards`).
"""

from __future__ import annotations

import operator
import threading

from .. import _native
from .guards import Guard, guard_fits
from .kind import MISSING

BOILERPLATE = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__firstlineno__",
        "__static_attributes__",
        "__annotations__",
        "__annotate__",
        "__annotate_func__",
        "__annotations_cache__",
        "__orig_bases__",
        "__parameters__",
        "__type_params__",
        "__slots__",
        "__match_args__",
        "__abstractmethods__",
        "_abc_impl",
        "__dataclass_fields__",
        "__dataclass_params__",
        "__slotnames__",
        "_is_protocol",
        "_is_runtime_protocol",
        "__protocol_attrs__",
        "__non_callable_proto_members__",
        "__callable_proto_members_only__",
    }
)
"""Attributes a class statement, a standard decorator or the standard
library's caches write that a trace never reads as values (names,
documentation, annotations, ABC and typing caches, ``copyreg``'s slot names,
set on a class's first copy; a dataclass's field table, whose defaults are
class attributes anyway)."""


def own_items(cls) -> tuple[tuple, list]:
    """``(names, values)`` of ``cls``'s own attributes that can change a trace."""
    d = cls.__dict__
    names = tuple([k for k in d if k not in BOILERPLATE])
    return names, [d[k] for k in names]


def type_tag(cls) -> int:
    """CPython's version tag of ``cls`` (0: none, or no accelerator to read
    it): equal tags mean neither it nor a base was assigned an attribute."""
    native = _native.NATIVE
    return 0 if native is None else native.type_tag(cls)


class ClassState:
    """What a user class held when its contents were keyed (``key``), and how
    to tell, without a walk, that it still does (:meth:`holds`).

    ``deep``: ``(where, guard)`` of what the tag cannot see (``where``: an
    attribute's name, a base's index, or None for the metaclass), in the
    order the walk of the contents met them; None if some part has no guard,
    and the contents are then walked again (``rewalk(cls, sinks)``: their
    key now) to be re-checked."""

    __slots__ = ("cls", "tag", "meta", "bases", "names", "values", "deep", "key", "rewalk")

    def holds(self, sinks) -> bool:
        """Whether the class still has this state's key (``sinks``: the side
        channels of the walk or match asking, see :mod:`.sinks`)."""
        cls = self.cls
        if cls in building():
            # Asked within the keying of its own contents, by a record made
            # elsewhere: there the class is keyed by identity (see Within),
            # so that record's key is not this walk's.
            return False
        if self.deep is None:
            return self.rewalk(cls, sinks) == self.key.content
        tag = self.tag
        if not tag or type_tag(cls) != tag:
            if type(cls) is not self.meta or cls.__bases__ is not self.bases:
                return False
            names, values = own_items(cls)
            if names != self.names or not all(map(operator.is_, values, self.values)):
                return False
            # What it holds is what it held (a cache beside it was set, say):
            # the tag it has now stands for that, for the next checks.
            self.tag = type_tag(cls)
        if not self.deep:
            return True
        # Numbered as the walk of the contents numbered them: the class
        # first; what is skipped here (the very objects, atoms) numbers nothing.
        seen = {id(cls): 0}
        leaves: list = []
        d = cls.__dict__
        chain = building()
        nested = cls in chain
        if not nested:  # (what its contents hold refers to it as to one being keyed)
            chain[cls] = False
        try:
            for where, guard in self.deep:
                if type(where) is str:
                    v = d.get(where, MISSING)
                elif where is None:
                    v = type(cls)
                else:
                    v = cls.__bases__[where]
                if not guard_fits(v, guard, leaves, sinks, seen):
                    return False
        finally:
            if not nested:
                del chain[cls]
        return not leaves


_BUILDING = threading.local()  # .classes: the classes this thread is keying, in order


def building() -> dict:
    """The classes this thread is keying the contents of (or re-checking),
    in order, each with whether it refers to one keyed before it."""
    found = getattr(_BUILDING, "classes", None)
    if found is None:
        found = _BUILDING.classes = {}
    return found


class Within:
    """The "state" of a user class met within the keying of its own contents,
    keyed there by identity (see :func:`state_of`): it holds only there. A
    record of a method made there (``super()`` reads the class from a cell)
    must not vouch for that method elsewhere, where the class is keyed by
    its contents."""

    __slots__ = ("cls",)
    tag = 0
    deep = None

    def __init__(self, cls):
        self.cls = cls

    def holds(self, sinks) -> bool:
        return self.cls in building()


class ClassGuard(Guard):
    """This very user class, its state still holding (a :class:`ClassState`,
    or :class:`Within` its own keying)."""

    __slots__ = ("state",)
    native = "class"

    def __init__(self, state):
        self.state = state

    def fits(self, v, leaves, sinks, seen) -> bool:
        return v is self.state.cls and self.state.holds(sinks)

    def emit(self, w, i, v):
        state = w.const(self.state)
        w.fail_if(i, f"{v} is not {state}.cls or not {state}.holds(sinks)")

    def spec(self, s):
        return (self.mark, *class_check(self.state, s))


def class_check(state, s) -> tuple:
    """What the accelerator reads of a class's state (``s``: the spec being
    built, see the runtime's ``hot``): ``(class, state, holds, deep)``: it
    reads the state's ``tag`` (which ``holds`` renews); deep: the specs of
    what the tag cannot see (None where some have no C case; False for
    :class:`Within`)."""
    if type(state) is Within:
        return (state.cls, state, state.holds, False)
    deep = None
    if state.deep is not None:
        try:
            deep = tuple([(where, s.value(guard)) for where, guard in state.deep])
        except s.refused:
            deep = None
    return (state.cls, state, state.holds, deep)


class DescriptorGuard(Guard):
    """A descriptor of this type whose wrapped functions fit these guards."""

    __slots__ = ("type", "attrs", "guards")
    numbers = True  # (the functions it wraps are numbered)
    native = "descriptor"

    def spec(self, s):
        return (self.mark, self.type, self.attrs, s.items(self.guards))

    def __init__(self, tp, attrs, guards):
        self.type, self.attrs, self.guards = tp, attrs, guards

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not self.type:
            return False
        for a, g in zip(self.attrs, self.guards, strict=True):
            x = getattr(v, a)
            if x is not g and not guard_fits(x, g, leaves, sinks, seen):
                return False
        return True
