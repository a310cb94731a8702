"""A redefined closure's own call function: the hot path with its record's checks written in.

A ``StableJitted`` holds a call function (see :mod:`.jitted`), so a call
reaches it with no Python frame of the wrapper's own. The general one
(``calls.call``) looks up the code's fast-path record and calls its
``match``; once that record's checks are compiled, the record gets a call
function of its own, which ``stable_jit`` hands to the wrappers it makes
for that code from then on: the entry lookup, the checks and JAX's dispatch
in one frame. Whatever does not fit goes to the general call function,
which decides afresh, so a call function never has to be right about more
than its own record.
"""

from __future__ import annotations

from .. import _native as native
from .._fingerprint import sinks
from .._fingerprint.checker import compile_call
from .._fingerprint.guards import (
    CHECKED_SLOTS,
    LEAF_SLOT,
    DictSlot,
    FunctionSlot,
    LiftedSlot,
    ListSlot,
    ObjectSlot,
    RefSlot,
    TupleSlot,
)
from .._fingerprint.kind import LEAF_TYPES, MISSING, TABLE
from .._fingerprint.rebuild import RebuildMismatch
from .._markers import sentinel
from .cache import Entry

_FAIL = "return _call(fn, opts, *args, **kwargs)"
_PROLOGUE = [
    # A wrapper made for this code holds a function whose code can be
    # replaced since (``fn.__code__ = ...``): then this record is not its.
    "if fn.__code__ is not _code:",
    "    " + _FAIL,
    "entry = _entries.get(opts)",
    "if entry is None:",
    "    " + _FAIL,
    "ready = entry.ready",
    "if ready is None:",
    "    " + _FAIL,
    "sinks = _sinks.SINKS",
]


def _epilogue(uses_leaves: bool) -> list[str]:
    star = "*leaves, " if uses_leaves else ""
    return [
        "entry.hits += 1",
        "try:",
        "    if kwargs:",
        f"        return ready({star}*args, **kwargs)",
        f"    return ready({star}*args)",
        "except _RebuildMismatch as e:",
        "    return _plainly(fn, opts, e, args, kwargs)",
    ]


def install(record, code, records, general, plainly) -> None:
    """Gives ``record`` (a fast-path record of ``code``, whose records are
    ``records``) its call function: ``general``'s hot path with the
    record's checks written in; what fails them goes to ``general``, and a
    trace whose rebuild does not replay its key walk to ``plainly``."""
    record.call = _native(record, code, general, plainly) or _compiled(
        record, code, general, plainly
    )
    if records.front is record:
        records.call = record.call


def _native(record, code, general, plainly):
    """The C accelerator's call function for ``record``, where it is built
    and every check of the record is one it makes: every slot of
    :mod:`..._fingerprint.guards` but a NumPy constant's, nested functions,
    containers and objects included. None otherwise."""
    if native.NATIVE is None:
        return None
    try:
        top = _function_spec(code, record, record.sinks, 0)
    except _NotNative:
        return None
    return native.NATIVE.Guard(
        top=top,
        sinks=record.sinks,
        leaf_slot=LEAF_SLOT,
        leaf_types=LEAF_TYPES,
        missing=MISSING,
        marks=_MARKS,
        table=TABLE,
        entries=record.entries,
        general=general,
        plainly=plainly,
        mismatch=RebuildMismatch,
        entry_type=Entry,
    )


# The accelerator's slots are tuples led by one of these, in the order of
# its guard.h (MARK_FUNCTION, MARK_DICT, ...).
_FUNCTION, _DICT, _TUPLE, _LIST, _REF, _OBJECT, _LIFTED = _MARKS = tuple(
    sentinel(f"the accelerator's {name} slot")
    for name in ("function", "dict", "tuple", "list", "back reference", "object", "lifted")
)
_MAX_DEPTH = 64


class _NotNative(Exception):
    """A slot the accelerator does not check."""


def _function_spec(code, record, top_sinks, depth):
    """``record``'s checks of a function of ``code`` (the very code, or a
    weakref to it) as the accelerator reads them."""
    if record.sinks is not top_sinks or depth > _MAX_DEPTH:
        raise _NotNative  # (a nested record of other side channels never fits)
    return (
        _FUNCTION,
        code,
        record.g_id,
        record.b_id,
        record.defaults,
        record.kwdefaults,
        tuple(name for name, _ in record.globals),
        tuple(_spec(s, top_sinks, depth) for _, s in record.globals),
        tuple(_spec(s, top_sinks, depth) for s in record.cells),
    )


def _spec(slot, top_sinks, depth):
    """``slot`` as the accelerator reads it: the very slot (an identity or
    atom, or LEAF_SLOT), else a tuple led by its mark."""
    t = type(slot)
    if t not in CHECKED_SLOTS:
        return slot

    def items(slots):
        return tuple(_spec(s, top_sinks, depth + 1) for s in slots)

    if t is FunctionSlot:
        return _function_spec(slot.code, slot.record, top_sinks, depth + 1)
    if t is DictSlot:
        return (_DICT, slot.keys, items(slot.items))
    if t is TupleSlot and _plain_tuple(slot.type):
        return (_TUPLE, slot.type, items(slot.items))
    if t is ListSlot:
        return (_LIST, items(slot.items))
    if t is RefSlot:
        return (_REF, slot.n)
    if t is ObjectSlot:
        return (_OBJECT, slot.cls, slot.kind, _spec(slot.state, top_sinks, depth + 1))
    if t is LiftedSlot:
        return (_LIFTED, slot.type)
    raise _NotNative  # a NumPy constant, compared by contents


def _plain_tuple(tp) -> bool:
    """Whether the accelerator may read ``tp``'s items as a tuple's (a
    NamedTuple's are; a class that iterates otherwise is left to Python)."""
    return tp.__iter__ is tuple.__iter__ and tp.__len__ is tuple.__len__


def _compiled(record, code, general, plainly):
    consts = {
        "_code": code,
        "_entries": record.entries,
        "_sinks": sinks,
        "_call": general,
        "_plainly": plainly,
        "_RebuildMismatch": RebuildMismatch,
    }
    return compile_call(record, _PROLOGUE, _FAIL, _epilogue, consts)
