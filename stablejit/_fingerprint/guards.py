"""Guards: what a child of a record must be for the record's key to stand.

A record (see :mod:`.records`) keeps, for each child of the function it
keyed, a *guard*: what a later value there must be. Three are plain
values: the very object kept by identity, an equal atom (:func:`same_atom`),
and :data:`ANY_ARRAY`. Every other kind is a subclass of :class:`Guard`,
which holds the kind's three forms side by side, so that they cannot drift
apart and a new kind is written in one place:

* ``fits(v, leaves, sinks, seen)``: the reference check, run interpreted.
  Whether ``v`` may stand there, appending the arrays it holds to
  ``leaves`` and numbering in ``seen`` what the walk would number
  (functions, lists, dicts, objects), so that back references count the
  same either way.
* ``emit(w, i, v)``: the same check as lines of Python, written by a record
  that keeps matching into one function (see :mod:`.codegen`).
* ``spec(s)``: the same check as the C accelerator reads it, a tuple led by
  the kind's ``mark`` and checked by the case of that name (``native``) in
  ``_speedups_c/guard_kinds.c``; a kind whose ``native`` is None has no C
  case, and a record holding it runs as generated Python.

Tests run every record through the three (``tests/test_agreement.py``).
This module holds the base and the kinds of one value; the kinds of
containers and objects are in :mod:`.container_guards`.
"""

from __future__ import annotations

import types
import weakref

import numpy as np

from .._markers import sentinel
from .kind import LEAF_TYPES, float_key

ANY_ARRAY = sentinel("any array")
"""The guard of an array: any array may stand there."""
ATOM_TYPES = frozenset({int, bool, float, complex, str, bytes, type(None)})
GUARD_TYPES: set[type] = set()
"""Every kind of :class:`Guard` (filled as they are defined)."""
NUMBERING_TYPES: set[type] = set()
"""The kinds whose check reads or numbers ``seen`` (their ``numbers``)."""


def same_atom(v, expected) -> bool:
    """Whether ``v`` has the key of the atom ``expected`` (an equal scalar
    computed anew, such as a learning rate, is another object)."""
    t = type(expected)
    if type(v) is not t or t not in ATOM_TYPES:
        return False
    return float_key(v) == float_key(expected) if t is float or t is complex else v == expected


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


def guard_fits(v, expected, leaves, sinks, seen) -> bool:
    """Whether ``v`` may stand where a record saw ``expected`` (not ``v``
    itself): another array for an array (appended to ``leaves``), an equal
    atom, or what a kind of :class:`Guard` lets stand."""
    if expected is ANY_ARRAY:
        if type(v) not in LEAF_TYPES:
            return False
        leaves.append(v)
        return True
    if type(expected) in GUARD_TYPES:
        return expected.fits(v, leaves, sinks, seen)
    return same_atom(v, expected)


def fresh(v, sinks, seen) -> bool:
    """Numbers ``v`` as the walk numbers a list, dict or object it meets for
    the first time; False if the walk would key it otherwise (a back
    reference, a side channel)."""
    if id(v) in seen or (sinks and id(v) in sinks):
        return False
    seen[id(v)] = len(seen)
    return True


class Guard:
    """A kind of guard: its reference check, its Python and its C spec (see
    the module's docstring). Subclasses say:

    * ``numbers``: whether the check reads or numbers ``seen``;
    * ``native``: the name of its case in the C accelerator, or None.
    """

    __slots__ = ()
    numbers = False
    native: str | None = None
    mark = None
    """The first item of its spec: which C case reads it."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__name__.startswith("_"):
            return  # a shared base, not a kind
        GUARD_TYPES.add(cls)
        if cls.numbers:
            NUMBERING_TYPES.add(cls)
        if cls.native is not None:
            cls.mark = sentinel(f"the accelerator's {cls.native} guard")

    def fits(self, v, leaves, sinks, seen) -> bool:
        raise NotImplementedError

    def emit(self, w, i: int, v: str) -> None:
        """Lines (through ``w``, a ``codegen.Writer``, at indent ``i``) that
        fail unless the value in variable ``v`` fits: by default, a call of
        its ``fits``."""
        seen = w.seen if self.numbers else None
        w.fail_if(i, f"not {w.const(self)}.fits({v}, leaves, sinks, {seen})")

    def spec(self, s) -> tuple:
        """The tuple the accelerator's case ``native`` reads (``s``: the
        spec being built, see the runtime's ``hot``)."""
        raise s.refused


def native_kinds() -> tuple:
    """``(name, mark)`` of each kind the accelerator checks: what its
    ``RecordCall()`` matches, by name, against its own cases."""
    return tuple(sorted((cls.native, cls.mark) for cls in GUARD_TYPES if cls.native))


class FunctionGuard(Guard):
    """A nested function (optax's and blackjax's closures of closures): one
    of the same code, re-checked by the record that keyed the function seen
    there (functions of one code at several places, as in optax's chain,
    each keep their own)."""

    __slots__ = ("code", "record")
    numbers = True
    native = "function"

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

    def emit(self, w, i, v):
        w.fail_if(i, f"type({v}) is not _Function or {v}.__code__ is not {w.const(self.code)}()")
        w.fresh(i, v, container=False)
        w.nested_record(i, self.record, v)

    def spec(self, s):
        return s.record(self.code, self.record)

    @classmethod
    def record_spec(cls, code, record, s) -> tuple:
        """A record's checks of a function of ``code`` (the very code, or a
        weakref to it), its children's specs made by ``s``: the top of a
        record's call function, and a nested function's spec."""
        return (
            cls.mark,
            code,
            record.g_id,
            record.b_id,
            record.defaults,
            record.kwdefaults,
            tuple(name for name, _ in record.globals),
            s.items(g for _, g in record.globals),
            s.items(record.cells),
            None if record.attrs is None else s.value(record.attrs),
        )


class RefGuard(Guard):
    """The object the walk numbered ``n``: a back reference (optax's chain
    holds the same functions in two places)."""

    __slots__ = ("n",)
    numbers = True
    native = "back reference"

    def __init__(self, n):
        self.n = n

    def fits(self, v, leaves, sinks, seen) -> bool:
        return seen.get(id(v), -1) == self.n

    def emit(self, w, i, v):
        w.fail_if(i, w.back_reference(v, self.n))

    def spec(self, s):
        return (self.mark, self.n)


class LiftedGuard(Guard):
    """A number of this type, lifted to an input (``lift_scalars=True``)."""

    __slots__ = ("type",)
    native = "lifted"

    def __init__(self, tp):
        self.type = tp

    def fits(self, v, leaves, sinks, seen) -> bool:
        if type(v) is not self.type:
            return False
        leaves.append(v)
        return True

    def emit(self, w, i, v):
        w.fail_if(i, f"type({v}) is not {w.const(self.type)}")
        w.line(i, f"leaves.append({v})")

    def spec(self, s):
        return (self.mark, self.type)


class HostArrayGuard(Guard):
    """A NumPy array kept as a constant (see ``values.HostArray``): another
    of the same shape, dtype and contents. Compared by contents, which the
    accelerator leaves to Python (so no C case)."""

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
