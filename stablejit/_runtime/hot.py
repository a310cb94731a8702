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
from .._config import config
from .._fingerprint import sinks
from .._fingerprint.codegen import compile_call
from .._fingerprint.guards import ANY_ARRAY, GUARD_TYPES, FunctionGuard, native_kinds
from .._fingerprint.kind import LEAF_TYPES, MISSING, TABLE
from .._fingerprint.rebuild import RebuildMismatch
from .cache import Entry
from .checks import check_call

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


def install(record, code, records, general, plainly, fn=None, leaves=None) -> None:
    """Gives ``record`` (a record of ``code``, whose records are ``records``)
    its call function: ``general``'s hot path with the record's checks
    written in; what fails them goes to ``general``, and a trace whose
    rebuild does not replay its key walk to ``plainly``. With
    ``config.check_records``, the call function's checks must give
    ``record``'s key and ``leaves`` on ``fn``, the function whose match
    made it."""
    call = _native(record, code, general, plainly) or _compiled(record, code, general, plainly)
    if config.check_records and fn is not None:
        check_call(record, call, fn, leaves)
    record.call = call
    if records.front is record:
        records.call = record.call


def _native(record, code, general, plainly):
    """The C accelerator's call function for ``record``, where it is built
    and every guard of the record is of a kind it checks (all but a NumPy
    constant's). None otherwise."""
    if native.NATIVE is None:
        return None
    try:
        top = FunctionGuard.record_spec(code, record, _Spec(record.sinks))
    except _NotNative:
        return None
    return native.NATIVE.RecordCall(
        top=top,
        sinks=record.sinks,
        any_array=ANY_ARRAY,
        leaf_types=LEAF_TYPES,
        missing=MISSING,
        kinds=_KINDS,
        table=TABLE,
        entries=record.entries,
        general=general,
        plainly=plainly,
        mismatch=RebuildMismatch,
        entry_type=Entry,
    )


_KINDS = native_kinds()
_MAX_DEPTH = 64


class _NotNative(Exception):
    """A guard the accelerator does not check."""


class _Spec:
    """A record's guards as the accelerator reads them, each kind's spec
    made by its own ``spec`` (see the fingerprint's guards): what they call
    back for their children."""

    refused = _NotNative

    def __init__(self, top_sinks):
        self.top_sinks, self.depth = top_sinks, 0

    def value(self, guard):
        """``guard``'s spec: the very value (an identity or atom, or
        ANY_ARRAY), else a tuple led by its kind's mark."""
        t = type(guard)
        if t not in GUARD_TYPES:
            return guard
        if t.native is None or self.depth > _MAX_DEPTH:
            raise _NotNative
        self.depth += 1
        try:
            return guard.spec(self)
        finally:
            self.depth -= 1

    def items(self, guards) -> tuple:
        return tuple([self.value(g) for g in guards])

    def record(self, code, record) -> tuple:
        if record.sinks is not self.top_sinks:
            raise _NotNative  # (a nested record of other side channels never fits)
        return FunctionGuard.record_spec(code, record, self)


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
