"""Records: a redefined function's last key, re-checked by identity (the fast path).

A nested function is redefined on every call, typically over the same globals
dict and the same immutable values, new arrays, and other such functions (an
optax optimiser is closures of closures in NamedTuples). Per code object, the
last key is kept with what each child of the function was (a *record*); a
later function of that code whose children are again the very same objects,
arrays, or functions, tuples, lists, string-keyed dicts and plain objects
that fit in turn, has that key, found without a walk: containers are
re-checked item by item against what the key was built from, by identity
first, never re-keyed. Anything else takes the full walk (see :mod:`.walk`).

What a child must be is each kind's say (``Kind.guard``), as one of the
guards of :mod:`.guards`; this module holds the records, which a record that
keeps matching has compiled (:mod:`.codegen`).
"""

from __future__ import annotations

import operator
from itertools import islice

from .._config import config
from .code import FastRecords
from .codegen import compile_match
from .guards import (
    ANY_ARRAY,
    ATOM_TYPES,
    NUMBERING_TYPES,
    LiftedGuard,
    RefGuard,
    fresh,
    guard_fits,
    same_defaults,
    undo,
)
from .kind import LEAF, LEAF_TYPES, LIFTED_SCALAR, MISSING, NO_GUARD, TABLE, ref_number
from .parts import ATTRIBUTES, CELL, DEFAULTS, GLOBAL, KWDEFAULTS, SUNK
from .sinks import is_sink_key

FAST_PATH_TRIES = 8
"""Failed fast-path builds after which a code object's functions stop trying
(one whose children its guards cannot re-check never qualifies)."""

COMPILE_AFTER = 4
"""Matches after which a record's checks are compiled into one function."""

KEPT_RECORDS = 8
"""Records kept per code object. One code keyed at several places of one
structure (optax wraps each transform of a chain in a closure of one code;
a closure built over each of several models, called in turns) keeps a record
per shape, instead of one rebuilt at every place. Kept most recent first, so
more shapes than this in a cycle miss every record: each miss then walks."""


def known_key(fast: FastRecords, fn, w):
    """``fn``'s key from the first record of its code (``fast``, see
    ``CodeInfo.fast``) that holds in walk ``w``, or None. The record that
    holds moves to the front, where a call's hot path looks."""
    front = fast.front
    for record in (front, *fast.others):
        if record.lift is not w.lift or record.static is not w.static:
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
    fast.call = record.call


class Record:
    """A record: the last key of a function of one code object, and what each
    of its children must be for that key to stand (see the module's
    docstring). The same globals dict and side channels are required; each
    child must fit its guard: the very same object (immutable, so equal),
    another array, a lifted number of its type, or a function or container
    whose own children fit in turn.
    """

    __slots__ = (
        "g_id",
        "b_id",
        "sinks",
        "defaults",
        "kwdefaults",
        "globals",
        "cells",
        "attrs",
        "key",
        "entries",
        "nested",
        "lift",
        "static",
        "match",
        "hits",
        "call",
    )

    @classmethod
    def build(cls, fn, places, part_keys, w, key, n_leaves):
        """A fast path for ``fn``'s code, or None if ``fn`` has other children
        (``w``: the walk that just keyed ``fn`` as ``key``, its parts
        ``places`` as ``part_keys``, their arrays ``w.leaves[n_leaves:]``;
        see :mod:`.parts`)."""
        # Defaults are re-checked as atoms (see same_defaults), so they must
        # hold no leaves: under lift_scalars, no numbers that it lifts.
        allowed = ATOM_TYPES if w.lift is None else ATOM_TYPES - {float, complex}
        for d in (fn.__defaults__, fn.__kwdefaults__):
            values = d.values() if isinstance(d, dict) else d or ()
            if any(type(v) not in allowed for v in values):
                return None
        checks = []
        cells = []
        attrs = None
        for (what, name, _, v), k in zip(places, part_keys, strict=True):
            if what is GLOBAL:
                if v is SUNK:
                    continue  # re-read by nobody: the key holds the sink's identity
                guard = guard_of(v, k, w.records)
                if guard is NO_GUARD:
                    return None
                checks.append((name, guard))
            elif what is CELL:
                if v is SUNK:  # a sink is this very cell, which a redefinition replaces
                    return None
                guard = guard_of(v, k, w.records)
                if guard is NO_GUARD:
                    return None
                cells.append(guard)
            elif what is ATTRIBUTES:
                # (functools.wraps's __wrapped__: every decorated function)
                attrs = guard_of(v, k, w.records)
                if attrs is NO_GUARD:
                    return None
            elif what is not DEFAULTS and what is not KWDEFAULTS:
                return None  # attribute chains: the full walk
        g, b = fn.__globals__, fn.__builtins__
        self = cls()
        # By id, not reference: a record must not keep a module's globals
        # alive. Matching ids are enough, as every name is re-read from the
        # function's own dicts and compared by identity with what is held here.
        self.g_id, self.b_id, self.sinks = id(g), id(b), w.sinks
        self.defaults, self.kwdefaults = fn.__defaults__, fn.__kwdefaults__
        self.globals, self.cells, self.key = tuple(checks), tuple(cells), key
        # What a non-empty ``fn.__dict__`` must be, checked after the cells
        # (the walk's order); None: it must be empty.
        self.attrs = attrs
        # Nested guards number the functions they match, as a walk would, so
        # that back references (absolute numbers in ``key``, each re-checked
        # by a RefGuard) count the same either way.
        # The walk numbers a function's keyword defaults, a dict, right after
        # the function: the record numbers them too.
        self.nested = fn.__kwdefaults__ is not None or any(
            type(x) in NUMBERING_TYPES for x in (*(g for _, g in checks), *cells, attrs)
        )
        # The walk's lift_scalars (None or True): it decides the keys of numbers.
        self.lift = w.lift
        # Whether it keys a function inside a static argument, where some
        # kinds key by their own equality (see objects.OwnEquality): a record
        # vouches for walks of its kind only.
        self.static = w.static
        w.records[id(fn)] = self
        # Cache entries of ``key``, per stable_jit options: lets a call skip
        # hashing the key (see StableJitted.__call__).
        self.entries = {}
        # ``match``: interpreted, counting, until the record has proved
        # itself; then compiled (see :mod:`.codegen`), as a record matched
        # once only (a value that changes on every call) is not worth it.
        self.hits = 0
        self.match = self._counting
        # The runtime's call function for this record (see the runtime's
        # ``jitted``), made once ``match`` is compiled; None until then.
        self.call = None
        if config.check_records:
            self.check_built(fn, w, n_leaves)
        return self

    def check_built(self, fn, w, n_leaves) -> None:
        """Raises :class:`RecordCheckError` unless the interpreted checks give,
        on ``fn``, what walk ``w`` just gave it: the key, the arrays past
        ``n_leaves``, and the numbering (``config.check_records``)."""
        seen = w.seen
        start = dict(islice(seen.items(), seen[id(fn)] + 1))  # as the walk entered fn
        leaves = []
        got = self.interpret(fn, leaves, w.sinks, start)
        if got is not self.key:
            raise RecordCheckError(fn, "its own record does not match it")
        if not same_leaves(leaves, w.leaves[n_leaves:]) or start != seen:
            raise RecordCheckError(fn, "its record takes other arrays or numbers other objects")

    @property
    def compiled(self) -> bool:
        return self.hits >= COMPILE_AFTER

    def _counting(self, fn, leaves, sinks, seen=None):
        n = len(leaves)
        before = dict(seen) if seen is not None and config.check_records else None
        key = self.interpret(fn, leaves, sinks, seen)
        if key is not None:
            self.hits += 1
            if self.hits == COMPILE_AFTER:
                match = compile_match(self)
                if config.check_records:
                    self._check_compiled(match, fn, leaves[n:], sinks, seen, before)
                self.match = match
        return key

    def _check_compiled(self, match, fn, leaves, sinks, seen, before) -> None:
        """Raises :class:`RecordCheckError` unless ``match`` (the record's
        compiled checks) gives on ``fn`` what the interpreted ones just gave:
        the key, ``leaves``, and ``seen`` numbered from ``before``."""
        after = None
        if seen is not None:
            after = dict(seen)
            seen.clear()
            seen.update(before)
        mine = []
        if match(fn, mine, sinks, seen) is not self.key or not same_leaves(mine, leaves):
            raise RecordCheckError(fn, "its compiled checks disagree with its interpreted ones")
        if seen is not None and seen != after:
            raise RecordCheckError(fn, "its compiled checks number other objects")

    def interpret(self, fn, leaves, sinks, seen=None):
        """``fn``'s key if the checks hold (its leaves appended to ``leaves``,
        nested functions numbered in ``seen`` as a walk would), else None."""
        if (
            id(fn.__globals__) != self.g_id
            or id(fn.__builtins__) != self.b_id
            or sinks is not self.sinks
            or (
                fn.__defaults__ is not self.defaults
                and not same_defaults(fn.__defaults__, self.defaults)
            )
            or (
                fn.__kwdefaults__ is not self.kwdefaults
                and not same_defaults(fn.__kwdefaults__, self.kwdefaults)
            )
            or (fn.__dict__ and self.attrs is None)
        ):
            return None
        if seen is None and self.nested:
            seen = {id(fn): 0}  # a walk from ``fn`` numbers it first
        n, n_seen = len(leaves), len(seen) if seen is not None else 0
        if self.kwdefaults is not None and not fresh(fn.__kwdefaults__, sinks, seen):
            return undo(leaves, n, seen, n_seen)
        g = fn.__globals__
        for name, expected in self.globals:
            v = g.get(name, MISSING)
            if v is MISSING:
                v = fn.__builtins__.get(name, MISSING)
            if v is not expected and not guard_fits(v, expected, leaves, sinks, seen):
                return undo(leaves, n, seen, n_seen)
        cells = self.cells
        if cells:  # (a zip here would cost more than everything above)
            closure = fn.__closure__
            for i, expected in enumerate(cells):
                try:
                    v = closure[i].cell_contents
                except ValueError:
                    v = MISSING
                if v is not expected and not guard_fits(v, expected, leaves, sinks, seen):
                    return undo(leaves, n, seen, n_seen)
        attrs = self.attrs
        if attrs is not None:
            v = fn.__dict__
            if v is not attrs and not guard_fits(v, attrs, leaves, sinks, seen):
                return undo(leaves, n, seen, n_seen)
        return self.key


class RecordCheckError(AssertionError):
    """A record's checks disagreed with the walk, or one path of them with
    another, on the function they were proven on (``config.check_records``):
    a bug of stablejit's, never of the program."""

    def __init__(self, fn, what: str):
        name = getattr(fn, "__qualname__", repr(fn))
        super().__init__(f"stablejit: the fast-path record of {name}: {what}")


def same_leaves(a: list, b: list) -> bool:
    """Whether two lists of arrays hold the very same objects, in order."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def guard_of(v, k, records):
    """What a later value must be where ``v`` was keyed ``k``: ``v`` itself,
    any array, a lifted number of its type, the object a back reference
    names, or what ``v``'s kind says (``Kind.guard``: a function, tuple,
    list, dict or object re-checked in turn), else NO_GUARD (no fast path)."""
    if k is LEAF:
        # (A large NumPy array is lifted, but a small one would be a constant:
        # the walk tells them apart.)
        return ANY_ARRAY if type(v) in LEAF_TYPES else NO_GUARD
    if k is LIFTED_SCALAR:
        return LiftedGuard(type(v))
    n = ref_number(k)
    if n is not None:  # a function, list, dict or object met before
        return RefGuard(n)
    if is_sink_key(k) or k is v or type(v) in ATOM_TYPES:
        return v
    kind = TABLE.get(type(v))
    return NO_GUARD if kind is None else kind.guard(v, k, records)
