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

from .._fingerprint import sinks
from .._fingerprint.checker import compile_call
from .._fingerprint.rebuild import RebuildMismatch

_FAIL = "return _call(fn, opts, *args, **kwargs)"
_PROLOGUE = [
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


def install(record, records, general, plainly) -> None:
    """Gives ``record`` (a fast-path record of the code whose records are
    ``records``) its call function: ``general``'s hot path with the
    record's checks written in; what fails them goes to ``general``, and a
    trace whose rebuild does not replay its key walk to ``plainly``."""
    consts = {
        "_entries": record.entries,
        "_sinks": sinks,
        "_call": general,
        "_plainly": plainly,
        "_RebuildMismatch": RebuildMismatch,
    }
    record.call = compile_call(record, _PROLOGUE, _FAIL, _epilogue, consts)
    if records.front is record:
        records.call = record.call
