"""Verify mode: a sampled hit traced again, to check that its key saw all its trace read.

stablejit promises never to return a stale result: what a hit runs must be
what the function traces to now. A key sees only what its walk reaches; a
trace that reads anything else (``os.environ``, a file, a keying bug) would
go stale unseen. With ``config.verify = p``, each hit, with probability p,
traces the user's current function again with the call's inputs (its
abstract values: the same signature) and compares the program with the one
the entry runs for that signature, which JAX keeps in its trace cache, so
verify mode stores nothing (:func:`check`). The two are compared in a
canonical form (see :mod:`.jaxpr_form`).

A mismatch is logged as an ERROR on the ``stablejit`` logger, naming the
function, the entry's key and the call's key in the user's names and the
first line that differs, and counted (``cache_info().mismatches``; the
pytest plugin fails the test that made it); the call then runs the fresh
trace, so its result is right, and the stale entry is dropped.

The hot path pays nothing at p = 0: the sampling wrapper (made in
``canonical.ready_for``) is what an entry serves only while p > 0, and every
call function, Python or C, calls what the entry serves.
"""

from __future__ import annotations

import collections
import contextlib
import random
import threading
import weakref

from jax._src.pjit import _cpp_pjit  # jax.jit of a function with a jit's options

from .._diagnostics import stats
from .._diagnostics.describe import (
    Description,
    describe,
    differences,
    display_name,
    distance,
    location,
)
from .._diagnostics.explain import logger
from .._registry import Memo
from . import cache
from .jaxpr_form import first_difference, form

SAMPLE = random.Random().random
"""The sampler: its own generator, so that verify mode leaves the user's
``random`` stream as it was."""


class NotCached(Exception):
    """JAX holds no trace of the entry for the call's signature (see :func:`check`)."""


class _State(threading.local):
    entry = None  # the entry this thread is tracing for verify mode
    cached = False  # whether only JAX's cached trace may be read (see canonical)


STATE = _State()


def verifying(entry) -> bool:
    """Whether a trace of ``entry`` now is verify mode's, not the cache's own
    (not counted, not explained). Raises :class:`NotCached` where verify mode
    reads JAX's cached trace and there is none."""
    if STATE.entry is not entry:
        return False
    if STATE.cached:
        raise NotCached
    return True


@contextlib.contextmanager
def _tracing(entry, cached: bool):
    before = STATE.entry, STATE.cached
    STATE.entry, STATE.cached = entry, cached
    try:
        yield
    finally:
        STATE.entry, STATE.cached = before


def check(entry, ready, fn, args: tuple, kwargs: dict):
    """A hit of ``entry`` by ``fn`` sampled for verify mode: the call of
    ``ready`` (what the entry serves) with ``args`` (the leaves first) and
    ``kwargs``, once ``fn`` traced now has been compared with the trace the
    entry runs for them; on a mismatch, the fresh trace's result."""
    jitted = entry.jitted
    try:
        with _tracing(entry, cached=True):
            was = jitted.trace(*args, **kwargs).jaxpr
    except NotCached:
        # The first call of this signature (JAX traces it now, afresh), or
        # one JAX no longer holds: nothing to compare with.
        return ready(*args, **kwargs)
    fresh = _again(jitted)
    with _tracing(entry, cached=False):
        now = fresh.trace(*args, **kwargs).jaxpr
    difference = first_difference(_cached_form(was), form(now))
    stats.verified(entry, difference is None)
    TOTALS[0] += 1
    if difference is None:
        return ready(*args, **kwargs)
    _report(entry, fn, difference)
    cache.drop(entry)  # stale: the next call traces afresh
    return fresh(*args, **kwargs)  # (JAX holds its trace: compiled, not traced again)


_FORMS = Memo(256)
"""``id(jaxpr) -> (weak reference to it, its form)`` for the traces JAX
caches: every verified hit of a signature reads the same cached jaxpr, whose
form is half of what comparing costs, so it is written once. Held weakly, so
verify mode keeps no trace (nor its constants) alive past JAX's cache."""


def _cached_form(jaxpr) -> list[str]:
    known = _FORMS.get(id(jaxpr))
    if known is not None and known[0]() is jaxpr:
        return known[1]
    return _FORMS.put(id(jaxpr), (weakref.ref(jaxpr), form(jaxpr)))[1]


def _again(jitted):
    """A ``jax.jit`` of the entry's canonical function with the entry's
    options, through a new function object: JAX's caches, keyed by
    function, trace it afresh (and forget it with it)."""
    canonical = jitted._fun

    def again(*args, **kwargs):
        return canonical(*args, **kwargs)

    return _cpp_pjit(again, jitted._jit_info)


REPORTED: collections.deque[str] = collections.deque(maxlen=64)
"""The latest mismatches' messages (the pytest plugin fails a test with its own)."""
TOTALS = [0, 0]
"""Hits verified and mismatches found in this process, which ``clear_cache()``
leaves (the pytest plugin's summary reads them past every test's clearing)."""


def mismatches() -> int:
    """How many mismatches this process has logged."""
    return TOTALS[1]


_MAX_LINES = 40


def _report(entry, fn, difference) -> None:
    line, was, now = difference
    s = entry.counts.stats
    current = describe(fn)
    then = _entry_description(s.descriptions if s is not None else (), current)
    changed = differences(then, current) if then is not None else []
    why = "; ".join(changed) or "their keys are equal: the trace read what its key does not hold"
    message = (
        f"stable_jit({display_name(fn)}){location(fn)}: verify mode found a stale hit: "
        f"the cache ran another program than the function traces now ({why}).\n"
        f"First difference, line {line + 1} of its jaxpr:\n"
        f"  cached: {was.strip()}\n  now:    {now.strip()}\n"
        f"The entry's {_short(then)}\nThe call's {_short(current)}\n"
        "The call ran the fresh trace; the entry is dropped."
    )
    TOTALS[1] += 1
    REPORTED.append(message)
    logger.error("%s", message)


def _entry_description(descriptions, current: Description) -> Description | None:
    """The description of the entry's key among the function's latest: the
    nearest to the call's (on a hit, its key is the entry's)."""
    if not descriptions:
        return None
    return min(reversed(descriptions), key=lambda old: distance(old, current))


def _short(desc: Description | None) -> str:
    if desc is None:
        return "key: (not recorded)"
    lines = str(desc).split("\n")
    more = len(lines) - _MAX_LINES
    return "\n".join(lines[:_MAX_LINES] + ([f"  … {more} more lines"] if more > 0 else []))
