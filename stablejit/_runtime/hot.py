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
from .._fingerprint.guards import CHECKED_SLOTS, LEAF_SLOT
from .._fingerprint.kind import LEAF_TYPES, MISSING
from .._fingerprint.rebuild import RebuildMismatch

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
    and every check of the record is one it makes: an identity test, or an
    array of a lifted type (no nested functions, containers or objects,
    which number what they meet). None otherwise."""
    if native.NATIVE is None or record.nested:
        return None
    slots = [s for _, s in record.globals] + list(record.cells)
    if any(s is not LEAF_SLOT and type(s) in CHECKED_SLOTS for s in slots):
        return None
    return native.NATIVE.Guard(
        code=code,
        g_id=record.g_id,
        b_id=record.b_id,
        sinks_ns=vars(sinks),
        sinks=record.sinks,
        defaults=record.defaults,
        kwdefaults=record.kwdefaults,
        names=tuple(name for name, _ in record.globals),
        gslots=tuple(s for _, s in record.globals),
        cslots=tuple(record.cells),
        leaf_slot=LEAF_SLOT,
        leaf_types=LEAF_TYPES,
        missing=MISSING,
        entries=record.entries,
        general=general,
        plainly=plainly,
        mismatch=RebuildMismatch,
    )


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
