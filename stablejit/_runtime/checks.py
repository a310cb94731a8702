"""What a record's call function decides, run on its own: its checks without the call.

A record's checks exist in three forms (see the fingerprint's guards): the
interpreted reference, generated Python, and the C accelerator's. The call
function that :mod:`.hot` installs holds one of the last two, fused with
the entry lookup and JAX's dispatch. :func:`call_checks` runs those very
checks alone on a function and says what they give, ``(key, leaves,
numbering)`` or None, so that ``config.check_records`` can prove a call
function on the function whose match made it (:func:`check_call`), and the
agreement tests can give one function to all three forms.
"""

from __future__ import annotations

from .. import _native as native
from .._fingerprint import sinks
from .._fingerprint.codegen import compile_call_check
from .._fingerprint.records import RecordCheckError, same_leaves


def call_checks(record, call, fn):
    """``(key, leaves, numbering)`` that ``call``'s checks (a call function
    of ``record``: the accelerator's, else generated Python) give on
    ``fn``: its key, the arrays they take in order, and the ids of the
    objects they number, in order; or None where they do not hold."""
    if native.NATIVE is not None and type(call) is native.NATIVE.RecordCall:
        got = call.check(fn)
        if got is None:
            return None
        leaves, numbered = got
        return record.key, leaves, [id(x) for x in numbered]
    # A generated call function: the same lines, compiled around them alone.
    return compile_call_check(record)(fn, sinks.SINKS)


def check_call(record, call, fn, leaves) -> None:
    """Raises :class:`RecordCheckError` unless ``call``'s checks give
    ``record``'s key and ``leaves`` on ``fn``."""
    got = call_checks(record, call, fn)
    if got is None or got[0] is not record.key or not same_leaves(got[1], leaves):
        raise RecordCheckError(fn, "its call function's checks disagree with its record")
