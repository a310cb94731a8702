"""Callable → (static key, dynamic leaves).

:func:`fingerprint` walks everything a callable can see — code, defaults,
globals it reads, closure cells, bound ``self``, partial arguments — with the
kinds of :mod:`.classify`. Arrays and tracers become *leaves* (inputs
of the compiled computation); everything else becomes part of a hashable
*static key*. Two callables with equal keys trace to the same computation
given leaves of the same shapes.

:mod:`.rebuild` goes back at trace time: it puts tracers where the walk
found the leaves.
"""

from __future__ import annotations

from typing import Any

from . import sinks
from .classify import classify
from .kind import KEYS, ref_key

Lift = None | bool | frozenset
"""What ``lift_scalars`` asks for: None, True, or variable names."""


def key_of(v):
    """The ``key`` method of ``v``'s kind (classifying its type once)."""
    return classify(v).key


class KeyWalker:
    """Computes a static key and collects the leaves, in walk order."""

    __slots__ = ("leaves", "seen", "alive", "sinks", "lift", "name_ok", "records", "static")

    exact = True
    """Whether this walk only needs the key and leaves, so that kinds may
    take shortcuts; walks that watch each visit, or that lift the numbers of
    named variables, set it False."""

    sees_classes = False
    """Whether this walk must visit what user classes hold, which keys take
    from a walk of their own (see .classes): the snapshot of what a trace
    writes, whose visits are what it watches, sets it."""

    def __init__(self, lift: Lift = None):
        self.leaves: list = []
        self.seen: dict[int, int] = {}
        # What ``seen`` numbers, kept alive for the walk: a value made during
        # it (a pytree's flattened children, an attribute a property computes)
        # would otherwise leave its id to a later one, read as a back reference.
        self.alive: list = []
        # One version of the side channels for the whole walk (see .sinks).
        self.sinks = sinks.SINKS
        # Which Python numbers are lifted like arrays (see lift_scalars): None,
        # True (every float and complex) or the names of the variables whose
        # numbers are; ``name_ok`` is set while such a variable is walked.
        self.lift = lift
        self.name_ok = False
        # The fast-path record that keyed each function of this walk, by id:
        # an enclosing function's record re-checks those (see .records).
        self.records: dict[int, Any] = {}
        # Set while static arguments are walked (see the runtime's statics), which are
        # keyed as jax.jit keys them where their class says how.
        self.static = False

    def walk(self, v: Any):
        return (KEYS.get(type(v)) or key_of(v))(self, v)

    @staticmethod
    def fresh() -> KeyWalker:
        """A new plain key walk, for a part keyed on its own (a class's
        contents, see .classes), whatever walk meets it."""
        return KeyWalker(None)

    def enter(self, v) -> tuple | None:
        """Called by kinds that can form cycles: a back reference, or None.

        Kinds on the hot path inline this; subclasses that watch visits
        therefore watch ``seen`` (see :class:`Visits`), not this method.
        """
        seen = self.seen
        ref = seen.get(id(v))
        if ref is not None:
            return ref_key(ref)
        seen[id(v)] = len(seen)
        self.alive.append(v)
        return None


class Visits(dict):
    """A ``seen`` table that reports first visits and back references."""

    __slots__ = ("on_first", "on_ref")

    def __init__(self, on_first, on_ref):
        super().__init__()
        self.on_first = on_first
        self.on_ref = on_ref

    def get(self, k, default=None):
        ref = super().get(k, default)
        if ref is not None:
            self.on_ref(ref)
        return ref

    def __setitem__(self, k, v):
        super().__setitem__(k, v)
        self.on_first(k)


def walker(lift: Lift = None) -> KeyWalker:
    """A key walk; one that lifts the numbers of named variables takes no
    shortcuts (see ``exact``): there, whether a number is lifted depends on
    the variable holding it and, for an int, on its value (it must fit
    int32), which a fast-path record's check by type does not cover."""
    return KeyWalker(lift) if lift is None or lift is True else _NamedLiftingWalker(lift)


class _NamedLiftingWalker(KeyWalker):
    __slots__ = ()
    exact = False


def fingerprint(fn: Any, lift: Lift = None) -> tuple[Any, list]:
    """Returns ``(static_key, leaves)`` of ``fn``."""
    w = walker(lift)
    return w.walk(fn), w.leaves
