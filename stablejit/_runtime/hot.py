"""A redefined closure's own call function: the hot path with its record's checks written in.

A ``StableJitted`` is a ``functools.partial`` of a call function, so a call
reaches it with no Python frame of the wrapper's own. The general one
(``jitted._call``) looks up the code's fast-path record and calls its
``match``; once that record's checks are compiled, the record gets a call
function of its own, which ``stable_jit`` hands to the partials it makes
for that code from then on: the entry lookup, the checks and JAX's dispatch
in one frame. Whatever does not fit goes to the general call function,
which decides afresh, so a call function never has to be right about more
than its own record.
"""

from __future__ import annotations

from .. import _native as native
from .._fingerprint import sinks
from .._fingerprint.checker import compile_call
from .._fingerprint.guards import CHECKED_SLOTS, LEAF_SLOT, DictSlot
from .._fingerprint.kind import LEAF_TYPES, MISSING
from .._fingerprint.rebuild import RebuildMismatch
from .._markers import sentinel

_FAIL = "return _call(fn, opts, *args, **kwargs)"
_PROLOGUE = [
    # A partial made for this code holds a function whose code can be
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
    and every check of the record is one it makes: an identity test, an
    array of a lifted type, or a dict of such (a params dict), nested (no
    nested functions, lists, tuples or objects). None otherwise."""
    if native.NATIVE is None:
        return None
    try:
        gslots = tuple(_spec(s) for _, s in record.globals)
        cslots = tuple(_spec(s) for s in record.cells)
    except _NotNative:
        return None
    n_leaves, n_dicts = _count(gslots + cslots)
    return native.NATIVE.Guard(
        code=code,
        g_id=record.g_id,
        b_id=record.b_id,
        sinks_ns=vars(sinks),
        sinks=record.sinks,
        defaults=record.defaults,
        kwdefaults=record.kwdefaults,
        names=tuple(name for name, _ in record.globals),
        gslots=gslots,
        cslots=cslots,
        leaf_slot=LEAF_SLOT,
        leaf_types=LEAF_TYPES,
        missing=MISSING,
        dict_mark=_DICT_MARK,
        entries=record.entries,
        general=general,
        plainly=plainly,
        mismatch=RebuildMismatch,
        max_leaves=n_leaves,
        max_dicts=n_dicts,
    )


_DICT_MARK = sentinel("a dict's slot, for the accelerator")


class _NotNative(Exception):
    """A slot the accelerator does not check."""


def _spec(slot):
    """``slot`` as the accelerator's Guard reads it: the very slot (an
    identity test, or LEAF_SLOT), or for a dict ``(_DICT_MARK, keys, item
    specs)``."""
    if type(slot) is DictSlot:
        return (_DICT_MARK, slot.keys, tuple(_spec(s) for s in slot.items))
    if slot is not LEAF_SLOT and type(slot) in CHECKED_SLOTS:
        raise _NotNative
    return slot


def _count(specs) -> tuple[int, int]:
    """(arrays, dicts) that ``specs`` can take."""
    leaves = dicts = 0
    for s in specs:
        if s is LEAF_SLOT:
            leaves += 1
        elif type(s) is tuple and len(s) == 3 and s[0] is _DICT_MARK:
            inner = _count(s[2])
            leaves, dicts = leaves + inner[0], dicts + 1 + inner[1]
    return leaves, dicts


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
